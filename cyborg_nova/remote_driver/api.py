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

"""The driver half of the internal API, as a WSGI application.

- ``GET /hardware``: the devices, as the agent's own ``GET /hardware``
  lists local ones: the seed's ``uuid``, ``acc_specs`` and
  ``acc_status``, plus this project's extension (``driver``, ``pci``,
  ``placement``...) that lets the agent and nova-compute report them to
  Placement and hand their functions to guests;
- ``POST /discovery``: discover again now (202, in the background);
- ``GET /openapi.json``: this API's OpenAPI document.

The agent calls these without a token (the seed gives drivers none), so
the routes are public and the service listens on loopback only.
"""

from __future__ import annotations

from typing import Any, Callable

from oslo_config import cfg
import webob

from cyborg_nova.api import app as api_app
from cyborg_nova import version

TITLE = 'cyborg-nova out-of-process driver'

HARDWARE_RESPONSE = {
    'type': 'object',
    'required': ['hardware'],
    'properties': {'hardware': {'type': 'array', 'items': {
        'type': 'object',
        'required': ['uuid', 'acc_specs', 'acc_status', 'pci',
                     'placement'],
    }}},
}
DISCOVERY_RESPONSE = {
    'type': 'object',
    'required': ['status'],
    'properties': {'status': {'type': 'string'}},
}


class DriverHandlers:
    """The handlers of the driver API's routes, one method per route.

    :param hardware: the ``GET /hardware`` entries.
    :param request_discovery: starts a discovery; returns at once.
    """

    def __init__(self, hardware: Callable[[], list[dict]],
                 request_discovery: Callable[[], None]) -> None:
        self._hardware = hardware
        self._request_discovery = request_discovery

    def get_hardware(self, request: webob.Request) -> tuple[int, Any]:
        return 200, {'hardware': self._hardware()}

    def post_discovery(self, request: webob.Request) -> tuple[int, Any]:
        self._request_discovery()
        return 202, {'status': 'IN-PROGRESS'}


def build_app(conf: cfg.ConfigOpts, group: str,
              hardware: Callable[[], list[dict]],
              request_discovery: Callable[[], None]
              ) -> api_app.Application:
    """The driver service's WSGI application.

    :param group: the option group of its API options.
    :param hardware: the ``GET /hardware`` entries.
    :param request_discovery: starts a discovery; returns at once.
    """
    handlers = DriverHandlers(hardware, request_discovery)
    application: api_app.Application | None = None
    routes = [
        api_app.Route('GET', '/hardware', handlers.get_hardware, '',
                      'List the devices of this driver',
                      response=HARDWARE_RESPONSE, public=True),
        api_app.Route('POST', '/discovery', handlers.post_discovery, '',
                      'Discover the devices again', status=202,
                      response=DISCOVERY_RESPONSE, public=True),
        api_app.Route('GET', '/openapi.json',
                      lambda request: (200, application.openapi()), '',
                      'The OpenAPI document of this API',
                      response={'type': 'object'}, public=True),
    ]
    application = api_app.Application(TITLE, version.release_string(),
                                      routes, conf, group, [])
    return application
