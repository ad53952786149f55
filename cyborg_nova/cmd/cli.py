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

"""The ``cyborg-nova`` command: an operator's view of a compute host."""

from __future__ import annotations

import logging
import sys
import warnings

from cliff import app
from cliff import commandmanager
from oslo_config import cfg

from cyborg_nova.cmd import errors
from cyborg_nova import conf as cn_conf
from cyborg_nova import version

DESCRIPTION = """\
Accelerators (GPUs, FPGAs, crypto cards, SR-IOV NIC functions) of a Nova
compute host, as cyborg-nova discovers them and reports them to Placement.
Reads [cyborg_nova] and the driver groups from the config files given with
--config-file (default: nova.conf where oslo.config finds it)."""

#: The help of ``--config-file`` (and of ``openstack``'s
#: ``--cyborg-nova-config-file``).
CONFIG_FILE_HELP = (
    'A nova.conf-style file to read [cyborg_nova] and driver options from; '
    'repeat for more. Default: nova.conf as oslo.config finds it '
    '(/etc/nova/nova.conf).')


class CyborgNovaApp(app.App):
    """The cliff application; commands come from ``cyborg_nova.cli``."""

    def __init__(self) -> None:
        super().__init__(
            description=DESCRIPTION,
            version=version.version_string(),
            command_manager=commandmanager.CommandManager('cyborg_nova.cli'),
            deferred_help=True)
        self.conf: cfg.ConfigOpts | None = None
        # oslo.messaging (the notifications of ``program``) loads
        # oslo.service's eventlet backend, which warns that eventlet is
        # deprecated and logs its loading at INFO. The commands do not use
        # eventlet; both would bury the command's own output.
        warnings.filterwarnings('ignore', message=r'\s*Eventlet is deprecated')

    def configure_logging(self) -> None:
        super().configure_logging()
        logging.getLogger('oslo_service.backend').setLevel(logging.WARNING)

    def build_option_parser(self, description, version, argparse_kwargs=None):
        parser = super().build_option_parser(description, version,
                                             argparse_kwargs)
        parser.add_argument(
            '--config-file', action='append', default=[],
            metavar='PATH',
            help=CONFIG_FILE_HELP)
        return parser

    def initialize_app(self, argv) -> None:
        # config-check reports every bad value itself, with the rest of
        # what it finds, where any other command stops at the first.
        self.conf = load_config(self.options.config_file,
                                check=argv[:1] != ['config-check'])


def load_config(files: list[str], check: bool = True) -> cfg.ConfigOpts:
    """A fresh ConfigOpts with our options, read from ``files``.

    :param check: parse every value of our groups now.
    :raises oslo_config.cfg.Error: a file is missing or malformed, or
        (with ``check``) a value is not valid
        (:class:`~cyborg_nova.cmd.errors.BadValue`: one line naming the
        file, group, option and value).
    """
    conf = cfg.ConfigOpts()
    cn_conf.register_opts(conf)
    if not files:
        files = cfg.find_config_files(project='nova', prog='nova-compute')
    try:
        conf([], project='cyborg-nova', default_config_files=files)
    except cfg.Error as exc:
        raise errors.explained(exc) from exc
    return errors.check_values(conf) if check else conf


def main(argv: list[str] | None = None) -> int:
    return CyborgNovaApp().run(sys.argv[1:] if argv is None else argv)


if __name__ == '__main__':
    sys.exit(main())
