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

"""Options of the ``[cyborg_conductor]`` group (the conductor-lite).

The conductor-lite also reads ``[database]`` (oslo.db; where it keeps
the agents it knows) and ``[placement]`` (keystoneauth; where it reads
device usage from), both registered by :func:`register_opts`.
"""

from oslo_config import cfg
from oslo_db import options as db_options

from cyborg_nova.conf import api as api_conf
from cyborg_nova.conf import groups
from cyborg_nova import placement

GROUP = cfg.OptGroup(
    'cyborg_conductor',
    title='cyborg-nova conductor-lite options',
    help='The conductor-lite: where its REST API listens (port 6667 '
         'unless ``bind_port`` is set), who may call it, and how it '
         'watches and reaches the agents.')

#: The port of the REST API when ``bind_port`` is unset.
DEFAULT_PORT = 6667

#: Where the state goes when ``[database] connection`` is unset.
DEFAULT_CONNECTION = 'sqlite:////var/lib/cyborg-nova/conductor.sqlite'

OPTS = [
    cfg.IntOpt(
        'agent_down_time',
        default=60,
        min=1,
        help="""
Seconds an agent may stay silent before it is taken as DOWN.

Agents say ``POST /hello`` when they start and then periodically as a
heartbeat. An agent whose last heartbeat is older than this is listed
as ``DOWN`` by ``GET /agents``, is left out of ``GET /hardware``, and
gets one WARNING in the log (again only after it has come back and gone
silent again). Default: 60 seconds. Set it to a few heartbeat intervals
of the agents, so that one lost heartbeat does not mark an agent DOWN.

Related options:

* the agents' heartbeat interval (``[cyborg_agent]``)
"""),
    cfg.StrOpt(
        'agent_token',
        secret=True,
        help="""
Token the conductor-lite sends (as ``X-Auth-Token``) when it calls an
agent's REST API, e.g. ``GET /hardware``.

It must carry at least the ``reader`` role on the agents: one of their
``[cyborg_agent] reader_token`` / ``admin_token``; ``POST /programs``
and ``POST /services`` (``cyborg-nova discover-services``) need their
``admin`` role. Unset by default:
calls are then made without a token, and agents that require one (all,
with ``auth_strategy = token``) answer 401, which ``GET /hardware``
lists as an error for that host.

Related options:

* ``agent_timeout``, ``agent_ca_file``
"""),
    cfg.FloatOpt(
        'agent_timeout',
        default=5.0,
        min=0.1,
        help="""
Seconds to wait for an agent's answer when calling its REST API.

An agent that does not answer in time is listed in the ``errors`` of
``GET /hardware`` instead of holding up the whole answer; agents are
asked concurrently, so one slow agent costs at most this long. It also
bounds each Placement request of ``GET /hardware`` when ``[placement]
timeout`` is unset. Default: 5 seconds.

Related options:

* ``agent_token``, ``[placement] timeout``
"""),
    cfg.StrOpt(
        'agent_ca_file',
        help="""
PEM file of the CA certificates that sign the agents' HTTPS
certificates. Unset by default: the system's trusted CAs are used. Only
matters for agents that registered an ``https://`` endpoint.

Related options:

* ``[cyborg_agent] ssl_cert_file`` on the agents
"""),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    """Register ``[cyborg_conductor]``, ``[database]`` and ``[placement]``.

    ``[database] connection`` defaults to :data:`DEFAULT_CONNECTION`.
    """
    groups.register(conf, GROUP, OPTS)
    api_conf.register_opts(conf, GROUP.name)
    db_options.set_defaults(conf, connection=DEFAULT_CONNECTION)
    placement.register_opts(conf)


def list_opts():
    """The ``[cyborg_conductor]`` options, for the sample config.

    ``[database]`` and ``[placement]`` are documented by their libraries'
    own ``oslo.config.opts`` namespaces (``oslo.db``, keystoneauth's
    loading options).
    """
    return {GROUP: api_conf.API_OPTS + OPTS}
