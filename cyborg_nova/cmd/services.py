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

"""``agent-list``, ``discover-services`` and ``service-list``.

The generic-driver spec's "discover services" and "service-list": the
services each accelerator offers are discovered on every host (through
the conductor-lite, which asks every UP agent; or here, with
``--local``) and stored in each host's state store, where
``service-list`` reads them. ``agent-list`` shows the agents the
conductor-lite knows, with their drivers.
"""

from __future__ import annotations

import datetime

from cliff import lister

from cyborg_drivers import sysfs
from cyborg_nova.cmd import columns
from cyborg_nova.cmd import errors
from cyborg_nova.cmd import hostargs
from cyborg_nova.conf import agent as agent_conf
from cyborg_nova import lifecycle
from cyborg_nova import service_client
from cyborg_nova import services

#: Seconds for the conductor's answer; it asks each agent within its own
#: agent_timeout.
TIMEOUT = 60.0


def _when(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(
        epoch, datetime.timezone.utc).isoformat(timespec='seconds')


def add_conductor_args(parser) -> None:
    parser.add_argument(
        '--conductor-url', metavar='URL',
        help='The conductor-lite\'s API. Default: [cyborg_agent] '
             'conductor_url of the config read (as the agent uses it).')
    parser.add_argument(
        '--conductor-token', metavar='TOKEN',
        help='Token for the conductor-lite (X-Auth-Token). Default: '
             '[cyborg_agent] conductor_token of the config read.')


class ConductorError(lifecycle.LifecycleError):
    """The conductor-lite could not be asked; the message says why."""


def conductor_call(app, parsed_args, method: str, path: str) -> dict:
    """``method path`` on the conductor-lite; its JSON answer.

    :raises ConductorError: unset URL, no answer, or an error status.
    """
    conf = hostargs.conf(app)
    if 'cyborg_agent' not in conf:
        agent_conf.register_opts(conf)
    url = parsed_args.conductor_url or conf.cyborg_agent.conductor_url
    token = (parsed_args.conductor_token
             or conf.cyborg_agent.conductor_token)
    if not url:
        raise ConductorError('no conductor: pass --conductor-url or set '
                             '[cyborg_agent] conductor_url')
    # An operator's command: proxies from the environment are honoured.
    client = service_client.Client(url, 'conductor-lite', token=token,
                                   timeout=TIMEOUT, trust_env=True)
    try:
        return client.request(method, path)[1]
    except service_client.ServiceError as exc:
        raise ConductorError(str(exc)) from exc
    finally:
        client.close()


class AgentList(hostargs.HostCommand, lister.Lister):
    """List the agents the conductor-lite knows, with their drivers.

    "state" is UP, or DOWN when the agent's last heartbeat is older than
    the conductor's agent_down_time; "drivers" are those the agent runs
    and its out-of-process drivers (TYPE@endpoint, with their state),
    asked of each agent at once: "error" says why an agent could not
    tell (DOWN, unreachable).
    """

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        add_conductor_args(parser)
        return parser

    def take_action(self, parsed_args):
        agents = conductor_call(self.app, parsed_args, 'GET',
                                '/agents')['agents']
        drivers = {row['host']: row for row in conductor_call(
            self.app, parsed_args, 'GET', '/drivers')['agents']}
        rows = []
        for agent in agents:
            known = drivers.get(agent['host'], {})
            names = list(known.get('local') or ()) + [
                '%s@%s (%s)' % (d['type'], d['endpoint'], d['state'])
                for d in known.get('drivers') or ()]
            rows.append((agent['host'], agent['endpoint'], agent['status'],
                         agent['state'], agent['last_seen'],
                         columns.ListColumn(names),
                         known.get('error') or ''))
        if not rows:
            self.app.stderr.write(
                'no agents registered with the conductor-lite: the list is '
                'empty (an agent registers when it starts with '
                '[cyborg_agent] conductor_url set)\n')
        return (('host', 'endpoint', 'status', 'state', 'last_heartbeat',
                 'drivers', 'error'), rows)


class DiscoverServices(hostargs.HostCommand, lister.Lister):
    """Discover the services of every host's accelerators.

    Through the conductor-lite, every UP agent discovers its host's
    devices and stores their services (QAT sym/asym/dc, an FPGA's loaded
    function, a GPU's vGPU type...) in the host's state store, which
    "cyborg-nova service-list" shows. With --local, this host's are
    discovered here, without agent or conductor. One row per host:
    devices refreshed, or the error. Exit status 1 if any host failed.
    """

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        add_conductor_args(parser)
        parser.add_argument(
            '--local', action='store_true',
            help='Discover this host\'s services here instead (reads '
                 'sysfs and writes [cyborg_nova] state_path).')
        hostargs.add_nodename(parser)
        return parser

    def take_action(self, parsed_args):
        if parsed_args.local:
            conf = hostargs.conf(self.app)
            store = hostargs.store(conf)
            drivers = lifecycle.host_drivers(conf, store)
            try:
                count = services.discover(store, parsed_args.nodename,
                                          drivers,
                                          conf.cyborg_nova.sysfs_root)
                rows = [(parsed_args.nodename, count, '')]
            except sysfs.NoSysfs as exc:
                rows = [(parsed_args.nodename, None, str(exc))]
        else:
            rows = [(row['host'], row['devices'], row['error'] or '')
                    for row in conductor_call(self.app, parsed_args, 'POST',
                                              '/services')['agents']]
        # The exit status is then 1 (hostargs.HostCommand).
        self.failed = any(error for _, _, error in rows)
        return ('host', 'devices', 'error'), rows


class ServiceList(hostargs.HostCommand, lister.Lister):
    """List the services each accelerator backend offers.

    What a tenant can ask for from each device: QAT services (sym, asym,
    dc...), an FPGA's loaded function, a NIC's physical network, a GPU's
    vGPU type; with the traits that request them, as
    "cyborg-nova discover-services" last found them ("discovered_at").
    Before any discovery, what the drivers find now is shown, with an
    empty "discovered_at".
    """

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        hostargs.add_nodename(parser)
        return parser

    def take_action(self, parsed_args):
        conf = hostargs.conf(self.app)
        store = hostargs.read_store(conf)
        stored = (store.services.of_node(parsed_args.nodename)
                  if store is not None else [])
        if stored:
            found = [(o, _when(o.discovered_at)) for o in stored]
        else:
            # Another host's name, or a mistyped one: say which it knows.
            errors.require_host(conf, store, parsed_args.nodename)
            accelerators = lifecycle.host_accelerators(
                conf, store).accelerators
            found = [(o, '') for o in services.rows(accelerators, 0.0)]
            self.app.stderr.write(
                'no services discovered yet on %s (see "cyborg-nova '
                'discover-services"): %s\n' % (
                    parsed_args.nodename,
                    'what the drivers find now' if found else
                    'the drivers find no accelerator now either; the list '
                    'is empty'))
        return (('address', 'driver', 'services', 'traits',
                 'discovered_at'),
                [(o.address, o.driver, columns.ListColumn(o.services),
                  columns.ListColumn(o.traits), when)
                 for o, when in found])
