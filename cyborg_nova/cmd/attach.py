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

"""``instance-attach``, ``instance-detach``: the generic-driver spec's attach.

Their old names are deprecated aliases (:mod:`cyborg_nova.cmd.deprecated`).
"""

from __future__ import annotations

import argparse
import os

from cliff import command
from oslo_config import cfg

from cyborg_drivers import base
from cyborg_drivers import sysfs
from cyborg_nova.cmd import hostargs
from cyborg_nova.conf import privsep as privsep_conf
from cyborg_nova.hotplug import errors as hotplug_errors
from cyborg_nova.hotplug import flow as hotplug_flow
from cyborg_nova.hotplug import guest as hotplug_guest
from cyborg_nova import lifecycle
from cyborg_nova import placement


def _positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError('must be 1 or more')
    return number


def _seconds(value: str) -> float:
    number = float(value)
    if number <= 0:
        raise argparse.ArgumentTypeError('must be more than 0')
    return number


def _common_parser(parser: argparse.ArgumentParser, verb: str,
                   wait: str) -> argparse.ArgumentParser:
    parser.add_argument('server', metavar='<server>',
                        help='uuid of the instance (its libvirt domain '
                             'uuid); it must run on this host')
    parser.add_argument(
        '--device', required=True, metavar='<device>',
        help='the accelerator to %s: its PCI address (e.g. 0000:3b:00.0) '
             'or its resource provider uuid (device-list)' % verb)
    parser.add_argument(
        '--libvirt-uri', default=hotplug_guest.DEFAULT_URI, metavar='<uri>',
        help='libvirt connection URI, as [libvirt] connection_uri of '
             'nova-compute (default: %(default)s). If the connection is '
             'refused for lack of permission, the libvirt_hotplug privsep '
             'daemon does the libvirt calls.')
    hostargs.add_nodename(parser)
    placement.register_argparse(parser)
    # keystoneauth's session options have an HTTP --timeout too; here
    # --timeout is the spec's wait for the guest (a group may replace a
    # conflicting option), and Placement requests keep keystoneauth's
    # default timeout.
    group = parser.add_argument_group('guest options',
                                      conflict_handler='resolve')
    group.add_argument(
        '--timeout', dest='guest_timeout', type=_seconds,
        default=hotplug_guest.DEFAULT_TIMEOUT, metavar='<seconds>',
        help='%s (default: %%(default)g)' % wait)
    parser.set_defaults(timeout=None)
    return parser


def _start_privsep(conf: cfg.ConfigOpts) -> None:
    """Let the libvirt_hotplug daemon read this command's config files.

    oslo.privsep starts its daemon from the global ``cfg.CONF`` (the
    context's ``[cyborg_nova_privsep_libvirt]`` section, and the files it
    hands privsep-helper), so it is loaded from the files this command
    reads, as a service's main() would.
    """
    privsep_conf.register_opts(cfg.CONF)
    cfg.CONF([], project='nova',
             default_config_files=list(conf.config_file or []),
             default_config_dirs=[])


def _prepare(app, parsed_args):
    """Checked arguments, the accelerator and the instance's guest.

    Everything that can be refused without changing anything is refused
    here: a bad uuid or device, a device no enabled driver manages, an
    instance libvirt does not know.
    """
    conf = hostargs.conf(app)
    server = hotplug_flow.server_uuid(parsed_args.server)
    store = hostargs.store(conf)
    try:
        found = lifecycle.host_accelerators(conf, store).accelerators
    except (base.DriverError, sysfs.NoSysfs) as exc:
        raise hotplug_errors.AttachError('cannot discover this host\'s '
                                         'accelerators: %s' % exc)
    accelerator = hotplug_flow.find_accelerator(found, parsed_args.nodename,
                                                parsed_args.device)
    client = hostargs.placement_client(app, parsed_args)
    if os.geteuid() != 0:
        _start_privsep(conf)
    guest = hotplug_guest.open_guest(parsed_args.libvirt_uri, server)
    return store, client, accelerator, guest


class InstanceAttach(hostargs.HostCommand, command.Command):
    """Hot-plug an accelerator into an instance running on this host.

    Adds the accelerator's resource class (--count of it) to the
    instance's allocations in Placement, records which units (PCI
    functions) the instance gets in the host's state store and hot-plugs
    each unit as a PCI hostdev into the guest and its definition. If
    libvirt refuses, the units are released and the allocations put back
    as they were; the error carries libvirt's reason. Placement
    credentials as for "cyborg-nova tree".
    """

    # Another driver failing to discover is said (a warning), but the
    # status is the attach's.
    driver_failures_fail = False

    def get_parser(self, prog_name):
        parser = _common_parser(
            super().get_parser(prog_name), 'attach',
            'how long to wait for the guest to release units already '
            'plugged in when a later one is refused')
        parser.add_argument(
            '--count', type=_positive_int, default=1, metavar='<n>',
            help='how many units (e.g. VFs) of the accelerator to attach '
                 '(default: 1)')
        return parser

    def take_action(self, parsed_args):
        store, client, accelerator, guest = _prepare(self.app, parsed_args)
        try:
            result = hotplug_flow.attach(
                client, store, parsed_args.nodename, guest, accelerator,
                parsed_args.count, parsed_args.guest_timeout,
                hold_freed=hostargs.conf(self.app).cyborg_scrub.enabled)
        finally:
            guest.close()
        self.app.stdout.write(
            'attached %s (%d %s of provider %s) to instance %s: %s\n'
            % (result.address, len(result.units), result.resource_class,
               result.provider, result.server, ', '.join(result.units)))


class InstanceDetach(hostargs.HostCommand, command.Command):
    """Hot-unplug an accelerator from an instance running on this host.

    Asks the guest to release every unit of the accelerator it holds and
    waits (--timeout) until libvirt confirms they left; only then are the
    units released and the accelerator's provider removed from the
    instance's allocations. If the guest does not release them in time,
    the allocation is left as it was (run the command again later).
    """

    # As for instance-attach: the status is the detach's.
    driver_failures_fail = False

    def get_parser(self, prog_name):
        return _common_parser(
            super().get_parser(prog_name), 'detach',
            'how long to wait for the guest to release the device')

    def take_action(self, parsed_args):
        store, client, accelerator, guest = _prepare(self.app, parsed_args)
        try:
            result = hotplug_flow.detach(
                client, store, parsed_args.nodename, guest, accelerator,
                parsed_args.guest_timeout,
                hold_freed=hostargs.conf(self.app).cyborg_scrub.enabled)
        finally:
            guest.close()
        self.app.stdout.write(
            'detached %s (provider %s) from instance %s: %s\n'
            % (result.address, result.provider, result.server,
               ', '.join(result.units) or 'no unit was recorded'))
