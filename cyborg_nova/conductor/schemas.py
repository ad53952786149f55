#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

"""The JSON schemas of the conductor-lite's REST API: bodies and answers.

:mod:`cyborg_nova.conductor.api` gives them to its routes, which validate
requests with them and describe both in the OpenAPI document; the
programming job of an agent, which it passes on, is in
:mod:`cyborg_nova.api.schemas`.
"""

from __future__ import annotations

from cyborg_nova.api import endpoints
from cyborg_nova.api import schemas as shared
from cyborg_nova.conductor import db
from cyborg_nova.conductor import hardware
from cyborg_nova.conductor import registry as registry_mod

UUID_PATTERN = shared.UUID_PATTERN
# jsonschema's "pattern" is a search, and "$" matches before a final
# newline: the handlers check these again with fullmatch.
HOST_PATTERN = r'^[A-Za-z0-9]([A-Za-z0-9._-]{0,253}[A-Za-z0-9])?$'
STATUS_PATTERN = r'^[A-Z][A-Z0-9_-]{0,31}$'
# What a schema can check of an endpoint; the handler normalises it
# (a bare host:port is http://host:port) and checks the rest.
ENDPOINT_PATTERN = endpoints.PATTERN

HELLO_BODY = {
    'type': 'object',
    'additionalProperties': False,
    'required': ['status', 'endpoint'],
    'properties': {
        'status': {
            'type': 'string', 'pattern': STATUS_PATTERN,
            'description': 'What the agent says of itself: READY, '
                           'DRAINING, IN-PROGRESS...'},
        'endpoint': {
            'type': 'string', 'maxLength': db.ENDPOINT_LENGTH,
            'pattern': ENDPOINT_PATTERN,
            'description': 'The http(s) URL of the agent\'s REST API; '
                           'the spec\'s bare host:port (or [v6]:port, or '
                           'host) is taken as http://host:port.'},
        'host': {
            'type': 'string', 'minLength': 1,
            'maxLength': db.HOST_LENGTH, 'pattern': HOST_PATTERN,
            'description': 'The agent\'s host: the Nova nodename. '
                           'Absent (as in the spec): the host part of '
                           'the endpoint, which must then be a host '
                           'name.'},
    },
}

AGENT = {
    'type': 'object',
    'additionalProperties': False,
    'required': ['host', 'endpoint', 'status', 'state', 'first_seen',
                 'last_seen'],
    'properties': {
        'host': {'type': 'string'},
        'endpoint': {'type': 'string'},
        'status': {'type': 'string'},
        'state': {'type': 'string',
                  'enum': [registry_mod.UP, registry_mod.DOWN]},
        'first_seen': {'type': 'string', 'format': 'date-time'},
        'last_seen': {'type': 'string', 'format': 'date-time'},
    },
}

AGENTS = {
    'type': 'object',
    'additionalProperties': False,
    'required': ['agents'],
    'properties': {'agents': {'type': 'array', 'items': AGENT}},
}


def _per_agent(key: str, schema: dict, description: str) -> dict:
    """An answer with one row per agent: ``key`` or an error."""
    return {
        'type': 'object',
        'additionalProperties': False,
        'required': ['agents'],
        'properties': {'agents': {'type': 'array', 'items': {
            'type': 'object',
            'additionalProperties': False,
            'required': ['host', key, 'error'],
            'properties': {
                'host': {'type': 'string'},
                key: {**schema, 'nullable': True,
                      'description': description + '; null with an '
                                                   'error.'},
                'error': {'type': 'string', 'nullable': True,
                          'description': 'Why the agent could not '
                                         'say: DOWN, unreachable, '
                                         'refused.'},
            },
        }}},
    }


AGENT_DRIVERS = _per_agent('drivers', {'type': 'array', 'items': {
    'type': 'object'}}, 'The agent\'s out-of-process drivers, as its '
    'GET /drivers lists them')
AGENT_DRIVERS['properties']['agents']['items']['required'].append('local')
AGENT_DRIVERS['properties']['agents']['items']['properties']['local'] = {
    'type': 'array', 'items': {'type': 'string'}, 'nullable': True,
    'description': 'The drivers the agent runs itself.'}
AGENT_SERVICES = _per_agent('devices', {'type': 'integer', 'minimum': 0},
                            'Devices whose services the agent refreshed')

HARDWARE_ENTRY = {
    **hardware.ENTRY_SCHEMA,
    'required': hardware.ENTRY_SCHEMA['required'] + ['host', 'usage'],
    'properties': {
        **hardware.ENTRY_SCHEMA['properties'],
        'host': {'type': 'string'},
        # OpenAPI 3.0's spelling of "or null": the document is 3.0.
        'usage': {'type': 'object', 'nullable': True,
                  'additionalProperties': {'type': 'integer'},
                  'description': 'The provider\'s usages in Placement by '
                                 'resource class; null when the uuid is '
                                 'no provider or Placement could not '
                                 'tell (see errors).'},
    },
}

HARDWARE = {
    'type': 'object',
    'additionalProperties': False,
    'required': ['hardware', 'errors'],
    'properties': {
        'hardware': {'type': 'array', 'items': HARDWARE_ENTRY},
        'errors': {'type': 'array', 'items': {
            'type': 'object',
            'additionalProperties': False,
            'required': ['host', 'message'],
            'properties': {'host': {'type': 'string'},
                           'message': {'type': 'string'}},
        }},
    },
}


PROGRAMS_BODY = {
    'type': 'object',
    'additionalProperties': False,
    'required': ['host', 'device', 'bitstream'],
    'properties': {
        'host': {'type': 'string', 'minLength': 1,
                 'maxLength': db.HOST_LENGTH, 'pattern': HOST_PATTERN,
                 'description': 'The agent\'s host (Nova nodename).'},
        'device': shared.PROGRAM_BODY['properties']['device'],
        'bitstream': shared.PROGRAM_BODY['properties']['bitstream'],
        'region': shared.PROGRAM_BODY['properties']['region'],
    },
}

PROGRAM = {
    'type': 'object',
    'additionalProperties': False,
    'required': ['id', 'host', 'device', 'bitstream', 'region', 'status',
                 'error', 'created_at', 'updated_at', 'job'],
    'properties': {
        'id': {'type': 'string'},
        'host': {'type': 'string'},
        'device': {'type': 'string'},
        'bitstream': {'type': 'string'},
        'region': {'type': 'string', 'nullable': True},
        'status': {'type': 'string',
                   'description': 'pending (the agent has not accepted '
                                  'it yet), running, succeeded, failed '
                                  'or refused'},
        'error': {'type': 'string', 'nullable': True},
        'created_at': {'type': 'string', 'format': 'date-time'},
        'updated_at': {'type': 'string', 'format': 'date-time'},
        'job': {**shared.PROGRAM_JOB, 'nullable': True,
                'description': 'The agent\'s journal of the job, as last '
                               'read.'},
    },
}

PROGRAM_RESPONSE = {
    'type': 'object',
    'additionalProperties': False,
    'required': ['program'],
    'properties': {'program': PROGRAM},
}
