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

"""The agent's REST API: the internal API spec's "Agent" half.

- ``POST /discovery``: start a discovery across the host and every
  registered out-of-process driver (202, ``{"status": "IN-PROGRESS"}``);
- ``GET /hardware``: the host's accelerators, and the remote drivers'
  devices, in the spec's format plus state and health;
- ``POST /hello``: an out-of-process driver registers;
- ``GET /drivers``: the registered out-of-process drivers;
- ``POST /program``: reprogram one of the host's FPGAs (202, the job;
  see :mod:`cyborg_nova.programming`), ``GET /program/{id}``: the job;
- ``GET /openapi.json``: this API's OpenAPI document.

Every route has its request and response schema here (those the
conductor-lite shares, in :mod:`cyborg_nova.api.schemas`), so the OpenAPI
document is the whole contract; policy rules are
:data:`cyborg_nova.policies.AGENT_RULES`.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from oslo_config import cfg
import webob
import webob.exc

from cyborg_drivers import device as device_model
from cyborg_nova.agent import remote
from cyborg_nova.api import app as api_app
from cyborg_nova.api import schemas
from cyborg_nova.conf import agent as agent_conf
from cyborg_nova import policies
from cyborg_nova import programming
from cyborg_nova import version

TITLE = 'cyborg-nova agent'

_STRINGS = {'type': 'array', 'items': {'type': 'string'}}

HELLO_BODY = {
    'type': 'object',
    'additionalProperties': False,
    'required': ['status', 'endpoint', 'type'],
    'properties': {
        'status': {'type': 'string', 'enum': ['READY'],
                   'description': 'The driver is installed and serving.'},
        'endpoint': {'type': 'string', 'format': 'uri', 'minLength': 1,
                     'maxLength': 2048,
                     'description': 'Base http(s) URL of the driver\'s '
                                    '/hardware and /discovery.'},
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
    },
}

UUID_PATTERN = schemas.UUID_PATTERN
PROGRAM_BODY = schemas.PROGRAM_BODY
PROGRAM_JOB = schemas.PROGRAM_JOB
PROGRAM_RESPONSE = schemas.PROGRAM_RESPONSE

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
    'required': ['drivers'],
    'properties': {'drivers': {'type': 'array', 'items': DRIVER}},
}


def build_app(conf: cfg.ConfigOpts, hardware: Callable[[], list[dict]],
              request_discovery: Callable[[], None],
              registry: remote.Registry,
              programmer: programming.Programmer | None = None,
              nodename: str = '') -> api_app.Application:
    """The agent's WSGI application.

    :param hardware: every ``GET /hardware`` entry, local and remote.
    :param request_discovery: starts (or coalesces into) a discovery in
        the background; returns at once.
    :param registry: the out-of-process drivers.
    :param programmer: reprograms this host's FPGAs (``nodename``'s);
        None: ``POST /program`` is refused (no Placement to fence with).
    """

    def post_discovery(request: webob.Request) -> tuple[int, Any]:
        request_discovery()
        return 202, {'status': 'IN-PROGRESS'}

    def get_hardware(request: webob.Request) -> tuple[int, Any]:
        return 200, {'hardware': hardware()}

    def post_hello(request: webob.Request, body: dict) -> tuple[int, Any]:
        try:
            driver = registry.hello(body['endpoint'], body['type'])
        except remote.InvalidEndpoint as exc:
            raise api_app.HTTPError(400, str(exc))
        except remote.RegistryFull as exc:
            raise api_app.HTTPError(409, '%s; stop one or restart the '
                                    'agent' % exc)
        return 200, {'driver': driver}

    def get_drivers(request: webob.Request) -> tuple[int, Any]:
        return 200, {'drivers': registry.drivers()}

    def post_program(request: webob.Request, body: dict
                     ) -> tuple[int, Any]:
        if programmer is None:
            raise api_app.HTTPError(409, 'programming is not available: '
                                    'the agent has no [placement] '
                                    'credentials to fence devices with')
        try:
            job = programmer.start(nodename, body['device'],
                                   body['bitstream'], body.get('region'),
                                   body.get('job_id'))
        except programming.Refused as exc:
            raise api_app.HTTPError(exc.code, str(exc))
        return 202, {'program': job.to_dict()}

    def get_program(request: webob.Request, job: str) -> tuple[int, Any]:
        found = None
        if programmer is not None and re.match(UUID_PATTERN, job):
            found = programmer.job(job)
        if found is None:
            raise api_app.HTTPError(404, 'no programming job %s' % job)
        return 200, {'program': found.to_dict()}

    application: api_app.Application | None = None
    routes = [
        api_app.Route('POST', '/discovery', post_discovery,
                      'cyborg_nova:agent:discovery',
                      'Start discovery across all drivers', status=202,
                      response=DISCOVERY_RESPONSE),
        api_app.Route('GET', '/hardware', get_hardware,
                      'cyborg_nova:agent:hardware',
                      'List the hardware of this host across all drivers',
                      response=HARDWARE_RESPONSE),
        api_app.Route('POST', '/hello', post_hello,
                      'cyborg_nova:agent:hello',
                      'Register an out-of-process driver',
                      body=HELLO_BODY, response=HELLO_RESPONSE,
                      # The registry is full.
                      errors=(409,)),
        api_app.Route('GET', '/drivers', get_drivers,
                      'cyborg_nova:agent:drivers',
                      'List the registered out-of-process drivers',
                      response=DRIVERS_RESPONSE),
        api_app.Route('POST', '/program', post_program,
                      'cyborg_nova:agent:program',
                      'Reprogram an FPGA of this host (fenced, proven '
                      'unallocated, verified)', status=202,
                      body=PROGRAM_BODY, response=PROGRAM_RESPONSE,
                      # Refused: incompatible, allocated, busy...
                      errors=(409,)),
        api_app.Route('GET', '/program/{job}', get_program,
                      'cyborg_nova:agent:program:show',
                      'Show a programming job', response=PROGRAM_RESPONSE),
        api_app.openapi_route(lambda: application,
                              'cyborg_nova:agent:openapi'),
    ]
    application = api_app.Application(
        TITLE, version.version_string(), routes, conf,
        agent_conf.GROUP.name, policies.AGENT_RULES)
    return application
