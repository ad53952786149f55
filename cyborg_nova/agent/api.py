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
- ``GET /drivers``: the registered out-of-process drivers, and the
  names of the drivers the agent runs itself;
- ``POST /services``: discover the services of the host's devices and
  store them for ``cyborg-nova service-list``;
- ``POST /program``: reprogram one of the host's FPGAs (202, the job;
  see :mod:`cyborg_nova.programming`), ``GET /program/{id}``: the job;
- ``GET /openapi.json``: this API's OpenAPI document.

Every route has its request and response schema (in
:mod:`cyborg_nova.agent.schemas`), so the OpenAPI document is the whole
contract; policy rules are :data:`cyborg_nova.policies.AGENT_RULES`.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from oslo_config import cfg
import webob
import webob.exc

from cyborg_drivers import sysfs
from cyborg_nova.agent import remote
from cyborg_nova.agent import schemas
from cyborg_nova.api import app as api_app
from cyborg_nova.conf import agent as agent_conf
from cyborg_nova import policies
from cyborg_nova import programming
from cyborg_nova import version

TITLE = 'cyborg-nova agent'


class AgentHandlers:
    """The handlers of the agent API's routes, one method per route.

    :param hardware: every ``GET /hardware`` entry, local and remote.
    :param request_discovery: starts (or coalesces into) a discovery in
        the background; returns at once.
    :param registry: the out-of-process drivers.
    :param programmer: reprograms this host's FPGAs (``nodename``'s);
        None: ``POST /program`` is refused (no Placement to fence with).
    :param local_drivers: the names of the drivers the agent runs.
    :param discover_services: stores the services of this host's
        devices in its state store; how many devices it refreshed.
    """

    def __init__(self, hardware: Callable[[], list[dict]],
                 request_discovery: Callable[[], None],
                 registry: remote.Registry,
                 programmer: programming.Programmer | None = None,
                 nodename: str = '',
                 local_drivers: Callable[[], list[str]] = list,
                 discover_services: Callable[[], int] | None = None
                 ) -> None:
        self._hardware = hardware
        self._request_discovery = request_discovery
        self._registry = registry
        self._programmer = programmer
        self._nodename = nodename
        self._local_drivers = local_drivers
        self._discover_services = discover_services

    def post_discovery(self, request: webob.Request) -> tuple[int, Any]:
        self._request_discovery()
        return 202, {'status': 'IN-PROGRESS'}

    def get_hardware(self, request: webob.Request) -> tuple[int, Any]:
        return 200, {'hardware': self._hardware()}

    def post_hello(self, request: webob.Request, body: dict
                   ) -> tuple[int, Any]:
        try:
            driver = self._registry.hello(body['endpoint'], body['type'])
        except remote.InvalidEndpoint as exc:
            raise api_app.HTTPError(400, str(exc))
        except remote.RegistryFull as exc:
            raise api_app.HTTPError(409, '%s; stop one or restart the '
                                    'agent' % exc)
        return 200, {'driver': driver}

    def get_drivers(self, request: webob.Request) -> tuple[int, Any]:
        return 200, {'drivers': self._registry.drivers(),
                     'local': self._local_drivers()}

    def post_services(self, request: webob.Request) -> tuple[int, Any]:
        if self._discover_services is None:
            raise api_app.HTTPError(409, 'service discovery is not '
                                    'available on this agent')
        try:
            devices = self._discover_services()
        except sysfs.NoSysfs as exc:
            raise api_app.HTTPError(409, 'no PCI bus to discover: %s'
                                    % exc)
        return 200, {'devices': devices}

    def post_program(self, request: webob.Request, body: dict
                     ) -> tuple[int, Any]:
        if self._programmer is None:
            raise api_app.HTTPError(409, 'programming is not available: '
                                    'the agent has no [placement] '
                                    'credentials to fence devices with')
        try:
            job = self._programmer.start(
                self._nodename, body['device'], body['bitstream'],
                body.get('region'), body.get('job_id'))
        except programming.Refused as exc:
            raise api_app.HTTPError(exc.code, str(exc))
        return 202, {'program': job.to_dict()}

    def get_program(self, request: webob.Request, job: str
                    ) -> tuple[int, Any]:
        found = None
        if self._programmer is not None and re.match(
                schemas.UUID_PATTERN, job):
            found = self._programmer.job(job)
        if found is None:
            raise api_app.HTTPError(404, 'no programming job %s' % job)
        return 200, {'program': found.to_dict()}


def build_app(conf: cfg.ConfigOpts, hardware: Callable[[], list[dict]],
              request_discovery: Callable[[], None],
              registry: remote.Registry,
              programmer: programming.Programmer | None = None,
              nodename: str = '',
              local_drivers: Callable[[], list[str]] = list,
              discover_services: Callable[[], int] | None = None
              ) -> api_app.Application:
    """The agent's WSGI application: :class:`AgentHandlers`, routed.

    The parameters are those of :class:`AgentHandlers`.
    """
    handlers = AgentHandlers(hardware, request_discovery, registry,
                             programmer, nodename, local_drivers,
                             discover_services)
    application: api_app.Application | None = None
    routes = [
        api_app.Route('POST', '/discovery', handlers.post_discovery,
                      'cyborg_nova:agent:discovery',
                      'Start discovery across all drivers', status=202,
                      response=schemas.DISCOVERY_RESPONSE),
        api_app.Route('GET', '/hardware', handlers.get_hardware,
                      'cyborg_nova:agent:hardware',
                      'List the hardware of this host across all drivers',
                      response=schemas.HARDWARE_RESPONSE),
        api_app.Route('POST', '/hello', handlers.post_hello,
                      'cyborg_nova:agent:hello',
                      'Register an out-of-process driver',
                      body=schemas.HELLO_BODY,
                      response=schemas.HELLO_RESPONSE,
                      # The registry is full.
                      errors=(409,)),
        api_app.Route('GET', '/drivers', handlers.get_drivers,
                      'cyborg_nova:agent:drivers',
                      'List the registered out-of-process drivers',
                      response=schemas.DRIVERS_RESPONSE),
        api_app.Route('POST', '/services', handlers.post_services,
                      'cyborg_nova:agent:services',
                      'Discover the services of this host\'s devices '
                      'and store them for service-list',
                      response=schemas.SERVICES_RESPONSE,
                      # No PCI bus; not available.
                      errors=(409,)),
        api_app.Route('POST', '/program', handlers.post_program,
                      'cyborg_nova:agent:program',
                      'Reprogram an FPGA of this host (fenced, proven '
                      'unallocated, verified)', status=202,
                      body=schemas.PROGRAM_BODY,
                      response=schemas.PROGRAM_RESPONSE,
                      # Refused: incompatible, allocated, busy...
                      errors=(409,)),
        api_app.Route('GET', '/program/{job}', handlers.get_program,
                      'cyborg_nova:agent:program:show',
                      'Show a programming job',
                      response=schemas.PROGRAM_RESPONSE),
        api_app.openapi_route(lambda: application,
                              'cyborg_nova:agent:openapi'),
    ]
    application = api_app.Application(
        TITLE, version.release_string(), routes, conf,
        agent_conf.GROUP.name, policies.AGENT_RULES)
    return application
