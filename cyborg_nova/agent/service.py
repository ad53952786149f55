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

"""The agent service: every part of it, wired from its configuration.

:class:`Agent` is what ``cyborg-nova-agent`` (:mod:`cyborg_nova.cmd.agent`,
which reads the options and runs the process) starts and stops:

- the REST API (:mod:`cyborg_nova.agent.api`) on cheroot;
- a discovery thread: a full discovery at start, every
  ``discovery_interval`` and on ``POST /discovery`` (requests arriving
  during a run are coalesced into one more run), each fencing what
  changed;
- the udev watcher: each PCI uevent re-discovers and fences its device;
- the out-of-process driver poller;
- heartbeats to the conductor, when ``conductor_url`` is set;
- FPGA programming jobs (``POST /program``), and at start the recovery of
  those a killed agent or CLI left unfinished (from their journal).
"""

from __future__ import annotations

import logging
import socket
import sys
import threading
import urllib.parse

from oslo_config import cfg

from cyborg_drivers import base
from cyborg_drivers import events
from cyborg_drivers import loader
from cyborg_drivers import sysfs
from cyborg_nova.agent import api
from cyborg_nova.agent import heartbeat
from cyborg_nova.agent import host
from cyborg_nova.agent import remote
from cyborg_nova.agent import remote_sync
from cyborg_nova.api import server
from cyborg_nova.conf import agent as agent_conf
from cyborg_nova import fencing
from cyborg_nova import health
from cyborg_nova import lifecycle
from cyborg_nova import notifications
from cyborg_nova import placement
from cyborg_nova import programming
from cyborg_nova import services
from cyborg_nova import store as state_store

LOG = logging.getLogger(__name__)
PROG = 'cyborg-nova-agent'


class Discovery:
    """The discovery thread: periodic, and on request, coalesced.

    :param run: one discovery (exceptions are logged, the thread goes on).
    :param interval: seconds between periodic runs; 0: only on request.
    """

    def __init__(self, run, interval: float) -> None:
        self._run = run
        self.interval = interval
        self._requested = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name='discovery')
        self.runs = 0

    def start(self) -> None:
        self._requested.set()
        self._thread.start()

    def request(self) -> None:
        """Ask for a run; returns at once.

        A request during a run makes one more run after it (the change
        the caller wants seen may have come after that run read sysfs);
        any number of requests meanwhile make only that one.
        """
        self._requested.set()

    def stop(self) -> None:
        self._stopping.set()
        self._requested.set()
        self._thread.join(30)

    def _loop(self) -> None:
        while True:
            self._requested.wait(self.interval or None)
            if self._stopping.is_set():
                return
            # Cleared before running: a request arriving from now on
            # sets it again and gets a run of its own.
            self._requested.clear()
            try:
                self._run()
            except Exception:
                LOG.exception('Discovery failed')
            self.runs += 1


class Agent:
    """Every part of the agent, wired from ``conf``; :meth:`start` it."""

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self.conf = conf
        opts = conf.cyborg_agent
        self.nodename = opts.nodename
        self.store = state_store.StateStore(
            conf.cyborg_nova.state_path, owner=conf.cyborg_nova.state_owner)
        self._driver_names = lifecycle.effective_names(conf, self.store)
        drivers = lifecycle.host_drivers(conf, self.store)
        self.notifier = notifications.Notifier(
            conf, '%s.%s' % (PROG, self.nodename))
        self.local = host.LocalHost(
            drivers, conf.cyborg_nova.sysfs_root, self.store,
            self.nodename, self._fencer(), conf.cyborg_nova.auto_ready,
            self.notifier, health.AerHealth(
                self.store, health.Policy.from_conf(conf), self.notifier))
        self.remote_recorder = remote_sync.RemoteRecorder(
            self.store, self.nodename, self.local.fencer,
            self.local.accelerators)
        self.registry = remote.Registry(opts.driver_failure_threshold,
                                        opts.driver_poll_interval,
                                        on_change=self.remote_recorder)
        self.discovery = Discovery(self._discover, opts.discovery_interval)
        self.watcher = (events.PciEventWatcher(self._on_event)
                        if opts.watch_udev else None)
        self.programmer = self._programmer()
        self.app = api.build_app(conf, self.hardware, self.request_discovery,
                                 self.registry, self.programmer,
                                 self.nodename,
                                 lambda: list(self._driver_names),
                                 self.discover_services)
        self.server: server.Server | None = None
        self.heartbeat: heartbeat.Heartbeat | None = None
        self._stopping = threading.Event()

    def _fencer(self) -> fencing.Fencer | None:
        if not self.conf.cyborg_agent.fence:
            LOG.info('Fencing is off ([cyborg_agent] fence = False): '
                     'Placement learns of changes at nova-compute\'s next '
                     'update')
            return None
        client = placement.from_conf(self.conf)
        if client is None:
            LOG.warning('Fencing is off: [placement] has no auth_type. '
                        'Placement learns of vanished or unhealthy devices '
                        'only at nova-compute\'s next update')
            return None
        return fencing.Fencer(client, kept=self.store.units.kept)

    def _programmer(self) -> programming.Programmer | None:
        client = placement.from_conf(self.conf)
        if client is None:
            LOG.warning('FPGA programming is off: [placement] has no '
                        'auth_type, so devices cannot be fenced')
            return None

        def privileged_setup():
            from cyborg_nova import privileged
            privileged.start_privsep(self.conf, 'sysfs_admin')
        # oslo.privsep imports eventlet, whose first import in a worker
        # thread leaves that thread unjoinable: import it in this one.
        from cyborg_nova import privileged
        privileged.quiet_import('privsep')
        return programming.Programmer(
            self.conf, self.store, client, lambda: self.local.drivers,
            self.conf.cyborg_nova.sysfs_root, privileged_setup,
            on_finished=lambda job: self.request_discovery(),
            notifier=self.notifier)

    def _recover_programs(self) -> None:
        # At start, then now and then: a job whose unfence could not
        # reach Placement, or that a killed CLI left, is finished here.
        interval = max(self.conf.cyborg_agent.discovery_interval, 30)
        while True:
            try:
                for job in self.programmer.recover():
                    LOG.info('Recovered programming job %s of %s: %s',
                             job.id, job.address, job.status)
            except Exception:
                LOG.exception('Recovering programming jobs failed')
            if self._stopping.wait(interval):
                return

    # -- what the API calls ------------------------------------------------

    def hardware(self) -> list[dict]:
        return self.local.hardware() + self.registry.hardware()

    def discover_services(self) -> int:
        """Store the services of this host's devices; how many."""
        return services.discover(self.store, self.nodename,
                                 self.local.drivers,
                                 self.conf.cyborg_nova.sysfs_root)

    def request_discovery(self) -> None:
        self.discovery.request()
        self.registry.discover_all()

    # -- the work ----------------------------------------------------------

    def _reload_drivers(self) -> None:
        # Drivers installed or uninstalled on the host (cyborg-nova
        # driver-install) take effect at the next discovery, as in
        # nova-compute, so both see the same devices.
        names = lifecycle.effective_names(self.conf, self.store)
        if names == self._driver_names:
            return
        try:
            drivers = loader.load(self.conf, names)
        except base.DriverError as exc:
            LOG.error('Keeping drivers %s: cannot load %s: %s',
                      ', '.join(self._driver_names), ', '.join(names), exc)
            return
        LOG.info('Accelerator drivers now %s', ', '.join(names) or 'none')
        self.local.set_drivers(drivers)
        self._driver_names = names

    def _discover(self) -> None:
        self._reload_drivers()
        try:
            results = self.local.refresh()
        except sysfs.NoSysfs as exc:
            LOG.error('Discovery found no PCI bus: %s', exc)
            return
        written = [r for r in results if r.outcome == fencing.WRITTEN]
        LOG.debug('Discovery: %d accelerators, %d providers written',
                  len(self.local.accelerators()), len(written))

    def _on_event(self, event: events.PciEvent) -> None:
        self.local.handle_event(event)

    # -- lifecycle ---------------------------------------------------------

    def advertised_url(self) -> str:
        opts = self.conf.cyborg_agent
        if opts.advertise_url:
            return opts.advertise_url.rstrip('/')
        url = self.server.url
        # Not a bind: a wildcard address the server already listens on
        # is replaced by this host's name in the advertised URL.
        if self.server.host in ('0.0.0.0', '::', ''):  # nosec B104
            netloc = socket.getfqdn()
            netloc = '[%s]' % netloc if ':' in netloc else netloc
            url = urllib.parse.urlunsplit((
                self.server.scheme, '%s:%d' % (netloc, self.server.port),
                '', '', ''))
        return url

    def start(self) -> None:
        opts = self.conf.cyborg_agent
        if self.watcher is not None:
            # Before the first discovery: an event in between is then
            # handled, not lost.
            try:
                self.watcher.start()
            except Exception as exc:
                LOG.error('Cannot watch udev (%s): changes are seen by '
                          'the periodic discovery only', exc)
                self.watcher = None
        try:
            self.local.prime()
        except sysfs.NoSysfs as exc:
            LOG.error('No PCI bus to discover: %s', exc)
        self.registry.start()
        for endpoint, type_ in self.remote_recorder.known():
            # Registered before this start: polled again, fenced if DOWN.
            try:
                self.registry.hello(endpoint, type_)
            except (remote.InvalidEndpoint, remote.RegistryFull) as exc:
                LOG.warning('Not polling out-of-process driver %s again: '
                            '%s', endpoint, exc)
        self.discovery.start()
        if self.programmer is not None:
            threading.Thread(target=self._recover_programs, daemon=True,
                             name='program-recovery').start()
        self.server = server.Server(
            server.with_auth(self.conf, agent_conf.GROUP.name, self.app),
            opts, agent_conf.DEFAULT_PORT, PROG)
        if opts.conductor_url:
            self.heartbeat = heartbeat.Heartbeat(
                opts.conductor_url, opts.conductor_token,
                self.advertised_url(), self.nodename,
                opts.heartbeat_interval)
            self.heartbeat.start()

    def stop(self) -> None:
        self._stopping.set()
        if self.programmer is not None:
            self.programmer.close()
        if self.server is not None:
            self.server.stop()
        if self.watcher is not None:
            self.watcher.stop()
        if self.heartbeat is not None:
            self.heartbeat.stop()
        self.registry.stop()
        self.discovery.stop()


if __name__ == '__main__':
    # The process's entry is in the edges (cyborg_nova.cmd.agent), which
    # may import the services; run here, this module would do nothing.
    sys.exit('%s: run cyborg-nova-agent, or python -m cyborg_nova.cmd.agent'
             % PROG)
