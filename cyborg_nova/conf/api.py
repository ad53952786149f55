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

"""Options shared by the agent's and the conductor-lite's REST APIs.

Each service registers them under its own group (``[cyborg_agent]``,
``[cyborg_conductor]``), next to its other options.
"""

from oslo_config import cfg

API_OPTS = [
    cfg.HostAddressOpt(
        'bind_host',
        default='127.0.0.1',
        help="""
Address the REST API listens on. Loopback by default: expose it on a
management network deliberately, with TLS (``ssl_cert_file``).
"""),
    cfg.PortOpt(
        'bind_port',
        help='TCP port of the REST API (default: the service\'s own).'),
    cfg.StrOpt(
        'auth_strategy',
        default='token',
        choices=[('token', 'static tokens from this file'),
                 ('keystone', 'Keystone tokens through keystonemiddleware '
                              '(configure [keystone_authtoken])')],
        help="""
How requests are authenticated. Every request needs a token in the
``X-Auth-Token`` header.

Related options:

* ``admin_token``, ``reader_token`` (``token``)
"""),
    cfg.StrOpt(
        'admin_token',
        secret=True,
        help="""
With ``auth_strategy = token``: the token that carries the ``admin``
role (changes and listings). Unset by default: no admin access.
"""),
    cfg.StrOpt(
        'reader_token',
        secret=True,
        help="""
With ``auth_strategy = token``: the token that carries the ``reader``
role (listings only). Unset by default.
"""),
    cfg.IntOpt(
        'max_body_size',
        default=65536,
        min=1024,
        help='Largest request body accepted, in bytes; larger is a 413.'),
    cfg.StrOpt(
        'ssl_cert_file',
        help='PEM certificate: when set (with ``ssl_key_file``), the API '
             'serves HTTPS only.'),
    cfg.StrOpt(
        'ssl_key_file',
        secret=True,
        help='PEM private key of ``ssl_cert_file``.'),
]


def register_opts(conf: cfg.ConfigOpts, group: str) -> None:
    conf.register_opts(API_OPTS, group=group)
