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

"""The driver service: discovery, its API, and its hello to the agent.

:class:`DriverService` runs one of the project's drivers over a sysfs
tree. It discovers at start and on ``POST /discovery``, serves the
result (:mod:`.api`) on loopback, and registers with the agent (``POST
/hello`` with the agent's admin token) at once and then every
``hello_interval`` seconds, sooner after a failed attempt: an agent
that restarts, or that forgot the driver, has it back within that time.
"""

from __future__ import annotations

import dataclasses
import logging
import threading

from oslo_config import cfg

from cyborg_drivers import device as device_model
from cyborg_drivers import discovery
from cyborg_drivers import loader
from cyborg_drivers import sysfs
from cyborg_nova.api import endpoints
from cyborg_nova.api import server
from cyborg_nova.conf import api as api_conf
from cyborg_nova.remote_driver import api
from cyborg_nova import service_client

LOG = logging.getLogger(__name__)
PROG = 'cyborg-nova-driver'
GROUP = 'cyborg_driver'
#: First delay before another hello after a failed one; doubled up to
#: the hello interval.
RETRY = 1.0
#: Seconds for the agent's answer to the hello.
TIMEOUT = 10.0


@dataclasses.dataclass(frozen=True)
class Settings:
    """What the service is told to do (the command line)."""

    driver: str
    agent_url: str
    agent_token: str
    nodename: str
    sysfs_root: str
    bind_host: str = '127.0.0.1'
    bind_port: int = 0
    hello_interval: float = 30.0
    #: The hello's ``type``; None: the device type of what is found.
    device_type: str | None = None


class DriverService:
    """One driver, served; :meth:`start` it, :meth:`stop` it.

    :raises loader.UnknownDriver: no such driver is installed.
    :raises cyborg_drivers.base.DriverError: the driver rejected its
        options (from ``conf``).
    :raises ValueError: ``bind_host`` is not loopback, or the agent URL
        is not an http(s) URL.
    """

    def __init__(self, conf: cfg.ConfigOpts, settings: Settings) -> None:
        if not server.is_loopback(settings.bind_host):
            raise ValueError(
                'refusing to listen on %s: the driver API has no '
                'authentication (the agent calls it without a token), so '
                'it listens on loopback only' % settings.bind_host)
        self.settings = settings
        self.agent_url = endpoints.normalize(settings.agent_url)
        self.conf = conf
        api_conf.register_opts(conf, GROUP)
        conf.set_override('bind_host', settings.bind_host, GROUP)
        conf.set_override('bind_port', settings.bind_port, GROUP)
        drivers = loader.load(conf, [settings.driver])
        self.discoverer = discovery.Discoverer(drivers, settings.sysfs_root)
        self._found: list[device_model.Accelerator] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._discovering = threading.Lock()
        self.app = api.build_app(conf, GROUP, self.hardware,
                                 self.request_discovery)
        self.server: server.Server | None = None
        self.agent = service_client.Client(
            self.agent_url, 'agent %s' % self.agent_url,
            token=settings.agent_token, timeout=TIMEOUT)
        self._hello_thread: threading.Thread | None = None
        #: Hellos the agent accepted.
        self.hellos = 0

    # -- discovery ---------------------------------------------------------

    def discover(self) -> list[device_model.Accelerator]:
        """Discover now; what was found.

        :raises sysfs.NoSysfs: there is no PCI bus under the root.
        """
        with self._discovering:
            result = self.discoverer.discover()
        for name, error in sorted(result.driver_errors.items()):
            LOG.warning('Driver %s: %s', name, error)
        with self._lock:
            self._found = list(result.accelerators)
        LOG.info('Discovered %d devices: %s', len(result.accelerators),
                 ', '.join(a.address for a in result.accelerators)
                 or 'none')
        return list(result.accelerators)

    def request_discovery(self) -> None:
        def run():
            try:
                self.discover()
            except sysfs.NoSysfs as exc:
                LOG.error('Discovery found no PCI bus: %s', exc)
        threading.Thread(target=run, daemon=True, name='discovery').start()

    def hardware(self) -> list[dict]:
        with self._lock:
            found = list(self._found)
        return [a.to_hardware(self.settings.nodename) for a in found]

    def device_type(self) -> str:
        if self.settings.device_type:
            return self.settings.device_type
        with self._lock:
            types = {a.device_type for a in self._found}
        return types.pop() if len(types) == 1 else 'GENERIC'

    # -- the agent ---------------------------------------------------------

    def hello(self) -> None:
        """``POST /hello`` to the agent once.

        :raises service_client.ServiceError: the agent is unreachable or
            refused it; the message says which.
        """
        body = {'status': 'READY', 'endpoint': self.server.url,
                'type': self.device_type()}
        self.agent.post('/hello', body)
        self.hellos += 1

    def _hello_loop(self) -> None:
        delay = RETRY
        while not self._stopping.is_set():
            try:
                self.hello()
            except service_client.ServiceError as exc:
                LOG.warning('%s (trying again in %.0f s)', exc, delay)
                wait, delay = delay, min(delay * 2,
                                         self.settings.hello_interval)
            else:
                if self.hellos == 1:
                    LOG.info('Registered with the agent %s',
                             self.agent_url)
                wait, delay = self.settings.hello_interval, RETRY
            self._stopping.wait(wait)

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        """Discover, serve, and start saying hello.

        :raises sysfs.NoSysfs: no PCI bus under the sysfs root.
        :raises OSError: the address cannot be bound.
        """
        self.discover()
        self.server = server.Server(self.app, self.conf[GROUP], 0, PROG)
        self._hello_thread = threading.Thread(
            target=self._hello_loop, daemon=True, name='hello')
        self._hello_thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self.server is not None:
            self.server.stop()
        if self._hello_thread is not None:
            self._hello_thread.join(2 * TIMEOUT + 1)
