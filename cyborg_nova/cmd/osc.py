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

"""The ``openstack cyborg-nova ...`` commands: an openstackclient plugin.

The commands are those of ``cyborg-nova`` (setup.cfg's
``openstack.cyborg_nova.v1`` names the same classes as
``cyborg_nova.cli``); this module only gives ``openstack`` the option
they read their config from, and that config as the plugin's "client".
"""

from __future__ import annotations

from oslo_config import cfg

from cyborg_nova.cmd import cli

#: ``openstack`` loads the command group ``openstack.cyborg_nova.v1``.
API_NAME = 'cyborg_nova'
API_VERSION_OPTION = 'os_cyborg_nova_api_version'
DEFAULT_API_VERSION = '1'
API_VERSIONS = ('1',)
CONFIG_OPTION = 'cyborg_nova_config_file'


def make_client(instance) -> cfg.ConfigOpts:
    """The config the commands read, from ``--cyborg-nova-config-file``.

    ``instance`` is openstackclient's ClientManager; nothing here needs a
    cloud login.
    """
    files = instance._cli_options.config.get(CONFIG_OPTION) or []
    return cli.load_config(list(files))


def build_option_parser(parser):
    parser.add_argument(
        '--cyborg-nova-config-file', dest=CONFIG_OPTION, action='append',
        default=[], metavar='PATH',
        help='cyborg-nova: a nova.conf-style file to read [cyborg_nova] '
             'and driver options from; repeat for more. Default: nova.conf '
             'as oslo.config finds it (/etc/nova/nova.conf).')
    return parser
