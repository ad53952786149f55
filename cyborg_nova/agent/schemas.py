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

"""The JSON schemas of the agent's REST API: each body and answer.

:mod:`cyborg_nova.agent.api` gives them to its routes, which validate
requests with them and describe both in the OpenAPI document (so they are
the whole contract); those the conductor-lite shares (a programming job)
are :mod:`cyborg_nova.api.schemas`. Each is valid both as JSON Schema and
as an OpenAPI 3.0 schema object.
"""

from __future__ import annotations

from cyborg_drivers import device as device_model
from cyborg_nova.agent import remote
from cyborg_nova.api import endpoints
from cyborg_nova.api import schemas as shared

_STRINGS = {'type': 'array', 'items': {'type': 'string'}}

HELLO_BODY = {
    'type': 'object',
    'additionalProperties': False,
    'required': ['status', 'endpoint', 'type'],
    'properties': {
        'status': {'type': 'string', 'enum': ['READY'],
                   'description': 'The driver is installed and serving.'},
        'endpoint': {'type': 'string', 'minLength': 1, 'maxLength': 2048,
                     'pattern': endpoints.PATTERN,
                     'description': 'Base http(s) URL of the driver\'s '
                                    '/hardware and /discovery; the '
                                    'spec\'s bare host:port (or [v6]:port, '
                                    'or host) is taken as '
                                    'http://host:port.'},
        'type': {'type': 'string',
                 'enum': list(device_model.DEVICE_TYPES),
                 'description': 'The device type the driver handles.'},
    },
}

DRIVER = {
    'type': 'object',
    'required': ['endpoint', 'type', 'state', 'failures', 'last_error',
                 'last_seen', 'registered_at', 'devices', 'problems'],
    'properties': {
        'endpoint': {'type': 'string'},
        'type': {'type': 'string'},
        'state': {'type': 'string', 'enum': list(remote.STATES)},
        'failures': {'type': 'integer', 'minimum': 0},
        'last_error': {'type': 'string', 'nullable': True},
        'last_seen': {'type': 'number', 'nullable': True},
        'registered_at': {'type': 'number'},
        'devices': {'type': 'integer', 'minimum': 0},
        'problems': _STRINGS,
    },
}

HARDWARE_ENTRY = {
    'type': 'object',
    'required': ['uuid', 'acc_specs', 'acc_status', 'driver', 'state',
                 'health'],
    'properties': {
        'uuid': {'type': 'string'},
        'acc_specs': {
            'type': 'object',
            'required': ['remote', 'num', 'device_type', 'acc_capability'],
            'properties': {
                'remote': {'type': 'integer', 'enum': [0, 1]},
                'num': {'type': 'integer', 'minimum': 0},
                'device_type': {'type': 'string'},
                'acc_capability': {'type': 'object'},
            },
        },
        'acc_status': {'type': 'object'},
        'driver': {'type': 'string',
                   'description': 'The local driver\'s name, or a remote '
                                  'driver\'s TYPE@endpoint.'},
        'state': {'type': 'string', 'nullable': True,
                  'description': 'Lifecycle state in the host\'s state '
                                 'store; null for remote devices.'},
        'health': {
            'type': 'object',
            'required': ['healthy', 'problems'],
            'properties': {'healthy': {'type': 'boolean'},
                           'problems': _STRINGS},
        },
        'aer': {
            'type': 'array',
            'items': {'type': 'object'},
            'description': 'The PCIe AER error counts of each PCI function '
                           'of the device (fatal, nonfatal, correctable; '
                           'null where they cannot be read, with the '
                           'reason); local devices only.',
        },
        'aer_effect': {
            'type': 'object',
            'nullable': True,
            'properties': {'effect': {'type': 'string',
                                      'enum': ['inform', 'fence']},
                           'reason': {'type': 'string'},
                           'since': {'type': 'number'}},
            'description': 'The effect the device\'s PCIe AER errors '
                           'took, until the operator clears it; null '
                           'when none. Local devices only.',
        },
    },
}

# The programming job's, shared with the conductor-lite.
UUID_PATTERN = shared.UUID_PATTERN
PROGRAM_BODY = shared.PROGRAM_BODY
PROGRAM_JOB = shared.PROGRAM_JOB
PROGRAM_RESPONSE = shared.PROGRAM_RESPONSE

DISCOVERY_RESPONSE = {
    'type': 'object',
    'required': ['status'],
    'properties': {'status': {'type': 'string', 'enum': ['IN-PROGRESS']}},
}
HARDWARE_RESPONSE = {
    'type': 'object',
    'required': ['hardware'],
    'properties': {'hardware': {'type': 'array', 'items': HARDWARE_ENTRY}},
}
HELLO_RESPONSE = {
    'type': 'object',
    'required': ['driver'],
    'properties': {'driver': DRIVER},
}
DRIVERS_RESPONSE = {
    'type': 'object',
    'required': ['drivers', 'local'],
    'properties': {
        'drivers': {'type': 'array', 'items': DRIVER,
                    'description': 'The out-of-process drivers.'},
        'local': {**_STRINGS,
                  'description': 'The drivers the agent runs itself.'},
    },
}
SERVICES_RESPONSE = {
    'type': 'object',
    'required': ['devices'],
    'properties': {'devices': {
        'type': 'integer', 'minimum': 0,
        'description': 'Devices whose services were refreshed.'}},
}
