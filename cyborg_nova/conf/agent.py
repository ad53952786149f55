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

"""Options of the ``[cyborg_agent]`` group (cyborg-nova-agent).

The agent also reads ``[cyborg_nova]`` (drivers, ``sysfs_root``,
``state_path``, ``auto_ready``: the same values nova-compute uses, so
give it nova.conf too) and ``[placement]`` (credentials for fencing).
"""

from __future__ import annotations

import socket

from oslo_config import cfg

from cyborg_nova.conf import api as api_conf
from cyborg_nova.conf import groups

GROUP = cfg.OptGroup(
    'cyborg_agent',
    title='cyborg-nova agent options',
    help='The per-host agent: internal REST API, udev watching, fencing, '
         'out-of-process drivers and conductor heartbeats.')

#: Port of the agent's REST API when ``bind_port`` is unset.
DEFAULT_PORT = 6666

OPTS = [
    cfg.StrOpt(
        'nodename',
        default=socket.gethostname(),
        sample_default='<the host name>',
        help="""
This host's node name: must equal the hypervisor hostname Nova reports
for it (``openstack hypervisor list``). Default: the host name
(``socket.gethostname()``).

Provider names and uuids of the accelerators derive from it, so an agent
with another name fences providers that do not exist (harmless, but the
real ones are then only fenced at nova-compute's next update).

Related options:

* ``[cyborg_nova] state_path`` (rows are kept per node name)
"""),
    cfg.URIOpt(
        'advertise_url',
        schemes=['http', 'https'],
        help="""
The URL of this agent's API as the conductor should call it.

Unset (default): derived from ``bind_host`` and the bound port; with a
wildcard ``bind_host`` (``0.0.0.0``, ``::``) the host's FQDN is used.

Related options:

* ``conductor_url``, ``bind_host``, ``bind_port``
"""),
    cfg.URIOpt(
        'conductor_url',
        schemes=['http', 'https'],
        help="""
Base URL of cyborg-nova-conductor, e.g. ``http://controller:6667``.

When set, the agent registers with ``POST <conductor_url>/hello`` and
repeats it every ``heartbeat_interval`` seconds. Unset (default): no
heartbeats; the agent still serves its API and fences on its own.

Related options:

* ``conductor_token``, ``heartbeat_interval``, ``advertise_url``
"""),
    cfg.StrOpt(
        'conductor_token',
        secret=True,
        help="""
Token sent in ``X-Auth-Token`` with heartbeats: one of the conductor's
tokens whose role may register agents (``admin`` or ``service``).
Unset by default.

Related options:

* ``conductor_url``
"""),
    cfg.IntOpt(
        'heartbeat_interval',
        default=10,
        min=1,
        help="""
Seconds between heartbeats to the conductor (default 10). After a failed
heartbeat the agent waits longer each time, up to six intervals, and logs
the failure once until it succeeds again.

Related options:

* ``conductor_url``
"""),
    cfg.IntOpt(
        'discovery_interval',
        default=60,
        min=0,
        help="""
Seconds between full discoveries of the host (default 60); 0 runs one
only at start and on ``POST /discovery``.

udev events re-discover the affected device at once, so this only
catches what no event announced (for example a health attribute that
changed without a uevent). After each discovery, changed devices are
fenced in Placement.

Related options:

* ``watch_udev``, ``fence``
"""),
    cfg.IntOpt(
        'driver_failure_threshold',
        default=3,
        min=1,
        help="""
Consecutive failed polls after which an out-of-process driver is DOWN
(default 3); its devices are then listed unhealthy. It is UP again as
soon as it answers.

Related options:

* ``driver_poll_interval``
"""),
    cfg.IntOpt(
        'driver_poll_interval',
        default=10,
        min=1,
        help="""
Seconds between polls of each out-of-process driver's ``GET /hardware``
(default 10). A DOWN driver is polled less often, up to eight intervals
apart.

Related options:

* ``driver_failure_threshold``
"""),
    cfg.BoolOpt(
        'watch_udev',
        default=True,
        help="""
Watch udev for PCI hot-plug, bind/unbind and change events and re-discover
the affected device at once (default True).

Needs libudev and read access to the udev netlink socket. With ``False``
changes are only seen by the periodic discovery.

Related options:

* ``discovery_interval``, ``fence``
"""),
    cfg.BoolOpt(
        'fence',
        default=True,
        help="""
Write an accelerator's ``reserved`` to Placement at once when a udev event
or a discovery changes it (default True): a vanished or unhealthy device
is fully reserved within the event's latency instead of at nova-compute's
next update.

The agent writes exactly the value nova-compute's next update computes
(a function of the device and its state in ``[cyborg_nova] state_path``),
never totals, traits or providers. Needs credentials in ``[placement]``;
without them fencing is off, with a warning.

Related options:

* ``[placement]`` (``auth_type`` and its options)
"""),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    """Register the REST API options and the agent's under ``GROUP``."""
    groups.register(conf, GROUP, OPTS)
    api_conf.register_opts(conf, GROUP.name)


def list_opts() -> dict:
    return {GROUP: api_conf.API_OPTS + OPTS}
