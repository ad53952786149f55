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

"""``cyborg-nova-driver``: one accelerator driver as its own service.

Runs one of the project's drivers (``--driver``) outside the agent and
nova-compute: it serves the driver half of the internal API (``GET
/hardware``, ``POST /discovery``) on loopback and registers with the
host's agent (``POST /hello``). The agent polls it, records its devices
in the host's state store, from where nova-compute reports them to
Placement, and fences them when the driver stops answering. Also
``python -m cyborg_nova.cmd.driver``.

It prints ``listening <url>`` on stdout once it serves, and runs until
SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys

from oslo_config import cfg
from oslo_log import log as oslo_logging

from cyborg_drivers import base
from cyborg_drivers import loader
from cyborg_drivers import sysfs
from cyborg_nova.cmd import config_check
from cyborg_nova.cmd import errors
from cyborg_nova.cmd import serving
from cyborg_nova import conf as cn_conf
from cyborg_nova.remote_driver import service

TOKEN_ENV = 'CYBORG_NOVA_AGENT_TOKEN'
LOG = service.LOG


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=service.PROG,
        description=__doc__.split('\n\n')[1].replace('\n', ' ').replace(
            '``', ''),
        epilog='Example: %s --driver intel_qat --agent-url '
               'http://127.0.0.1:6666 --config-file /etc/nova/nova.conf '
               '(with the agent\'s admin token in $%s)'
               % (service.PROG, TOKEN_ENV))
    parser.add_argument(
        '--driver', required=True, metavar='NAME',
        help='The driver to run, one of: %s. Leave it out of '
             '[cyborg_nova] enabled_drivers of nova-compute and the agent, '
             'or its devices are reported by both (the remote ones are '
             'then left out).' % ', '.join(sorted(loader.installed())))
    parser.add_argument(
        '--agent-url', required=True, metavar='URL',
        help='The agent\'s API, e.g. http://127.0.0.1:6666.')
    parser.add_argument(
        '--agent-token', metavar='TOKEN', default=os.environ.get(TOKEN_ENV),
        help='The agent\'s admin_token, which its POST /hello needs. '
             'Default: $%s (better than the command line, which other '
             'users of the host can read).' % TOKEN_ENV)
    parser.add_argument(
        '--config-file', metavar='FILE', action='append', default=[],
        help='A nova.conf-style file with [cyborg_nova] sysfs_root and '
             'the driver\'s own options; repeat for more.')
    parser.add_argument(
        '--sysfs-root', metavar='DIR', type=config_check.nonempty,
        help='Read sysfs from DIR instead of [cyborg_nova] sysfs_root.')
    parser.add_argument(
        '--nodename', default=socket.gethostname(),
        help='Nova\'s hypervisor hostname of this host (the devices\' '
             'uuids derive from it). Default: this host\'s name.')
    parser.add_argument(
        '--bind-host', default='127.0.0.1',
        help='Loopback address to listen on (default 127.0.0.1): the '
             'driver API has no authentication.')
    parser.add_argument(
        '--port', type=int, default=0,
        help='TCP port to listen on (default: a free one).')
    parser.add_argument(
        '--hello-interval', type=float, default=30.0, metavar='SECONDS',
        help='Say hello to the agent again this often (default 30): an '
             'agent that restarted has the driver back within it.')
    parser.add_argument(
        '--type', dest='device_type', metavar='TYPE',
        help='The device type the hello announces (GPU, FPGA, CRYPTO, '
             'NIC, GENERIC). Default: that of the devices found.')
    parser.add_argument('--debug', action='store_true',
                        help='Log at debug level.')
    return errors.one_line_usage(parser)


def load_config(files: list[str], debug: bool) -> cfg.ConfigOpts:
    """The options of ``files``, every installed driver's included.

    :raises oslo_config.cfg.Error: a file is missing or malformed.
    """
    conf = cfg.ConfigOpts()
    cn_conf.register_opts(conf)
    loader.register_opts(conf, list(loader.installed().values()))
    oslo_logging.register_options(conf)
    conf.set_default('use_stderr', True)
    conf(['--config-file=%s' % f for f in files], project='cyborg-nova',
         prog=service.PROG, default_config_files=[])
    conf.set_override('debug', debug)
    return conf


def main(argv: list[str] | None = None) -> int:
    """Serve the driver until SIGTERM or SIGINT; the exit status."""
    args = parser().parse_args(argv)
    if not args.agent_token:
        print('%s: error: the agent\'s token is needed: --agent-token, or '
              '$%s' % (service.PROG, TOKEN_ENV), file=sys.stderr)
        return 2
    conf = serving.read_config(service.PROG, lambda: load_config(
        args.config_file, args.debug))
    if conf is None:
        return errors.CONFIG_ERROR
    oslo_logging.setup(conf, service.PROG)
    settings = service.Settings(
        driver=args.driver, agent_url=args.agent_url,
        agent_token=args.agent_token, nodename=args.nodename,
        sysfs_root=args.sysfs_root or conf.cyborg_nova.sysfs_root,
        bind_host=args.bind_host, bind_port=args.port,
        hello_interval=args.hello_interval, device_type=args.device_type)
    try:
        driver = service.DriverService(conf, settings)
        driver.start()
    except (base.DriverError, ValueError, OSError, sysfs.NoSysfs) as exc:
        LOG.error('Cannot start: %s', serving.start_error(conf, exc))
        return 1
    stopping = serving.on_signals(LOG)
    return serving.serve(LOG, driver.server.url, stopping, driver.stop)


if __name__ == '__main__':
    sys.exit(main())
