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

"""``driver-install``, ``driver-uninstall``, ``driver-update``.

The generic-driver spec's install and uninstall of a driver, and a change
of its devices' VF count or QAT services. Their old names are deprecated
aliases (:mod:`cyborg_nova.cmd.deprecated`).
"""

from cliff import command

from cyborg_drivers import loader
from cyborg_nova.cmd import hostargs
from cyborg_nova import lifecycle
from cyborg_nova import placement
from cyborg_nova import privileged


def known_driver(name: str) -> str:
    """``name``, checked first: before the store or Placement is touched.

    :raises loader.UnknownDriver: no installed driver has that name (the
        message lists those that are).
    """
    installed = loader.installed()
    if name not in installed:
        raise loader.UnknownDriver(name, list(installed))
    return name


class DriverInstall(hostargs.HostCommand, command.Command):
    """Enable an accelerator driver on this host and ready its devices.

    Records the driver as installed in the host's state store (overriding
    [cyborg_nova] enabled_drivers; nova.conf is not edited) and marks
    every device it finds ready. Nothing is changed on the devices: the
    VFs of an SR-IOV device are enabled with driver-update --num-vfs.
    nova-compute reports the devices at its next update.
    """

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('driver', help='driver name (driver-list)')
        hostargs.add_nodename(parser)
        return parser

    def take_action(self, parsed_args):
        known_driver(parsed_args.driver)
        conf = hostargs.conf(self.app)
        done = lifecycle.install(conf, hostargs.store(conf),
                                 parsed_args.nodename, parsed_args.driver)
        for line in done:
            self.app.stdout.write(line + '\n')
        self.app.stdout.write('driver %s installed: %d device(s) ready\n'
                              % (parsed_args.driver, len(done)))


class DriverUninstall(hostargs.HostCommand, command.Command):
    """Disable an accelerator driver on this host.

    Refused while any of its devices holds allocations in Placement (the
    message names the instances). Otherwise its devices are held (fully
    reserved at nova-compute's next update) and their providers removed
    by nova-compute's following updates; the devices themselves are left
    as they are (driver-update --num-vfs 0 first removes VFs). Placement
    credentials as for "cyborg-nova tree".
    """

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('driver', help='driver name (driver-list)')
        hostargs.add_nodename(parser)
        placement.register_argparse(parser)
        return parser

    def take_action(self, parsed_args):
        known_driver(parsed_args.driver)
        conf = hostargs.conf(self.app)
        client = hostargs.placement_client(self.app, parsed_args)
        done = lifecycle.uninstall(
            conf, hostargs.store(conf), parsed_args.nodename,
            parsed_args.driver, hostargs.allocations_lookup(client))
        for line in done:
            self.app.stdout.write(line + '\n')
        self.app.stdout.write('driver %s uninstalled\n'
                              % parsed_args.driver)


class DriverUpdate(hostargs.HostCommand, command.Command):
    """Change a driver's devices on this host: VF count or QAT services.

    --num-vfs N sets the number of SR-IOV VFs of the driver's devices (or
    of --device only) through the sysfs_admin privsep helper. Refused
    while any of those devices holds allocations in Placement (the
    message names the instances): the kernel removes every VF to change
    the count. nova-compute reports the new inventory at its next update.
    The count is recorded in the host's state store: the kernel starts
    with no VFs after a reboot, and nova-compute writes it back when it
    starts.

    --qat-services SERVICES (intel_qat only) configures QAT 4xxx, 420xx
    and 6xxx devices (qat/cfg_services) through the same helper. The
    kernel takes new services only while the device is down: the command
    refuses a device that is up, and says how to stop it. The device
    uses the services once it is up again, which --num-vfs does.
    """

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('driver', help='driver name (driver-list)')
        change = parser.add_mutually_exclusive_group(required=True)
        change.add_argument('--num-vfs', type=int, metavar='N',
                            help='SR-IOV VFs to enable')
        change.add_argument(
            '--qat-services', metavar='SERVICES',
            help='services a QAT device is configured for, separated by '
                 '";" (quote them in a shell), e.g. "sym;dc": on 4xxx, '
                 '401xx, 402xx and 420xx up to two of asym, sym, dc, dcc; '
                 'on 6xxx up to three of those and decomp; dcc alone. The '
                 'device must be down (qat/state).')
        parser.add_argument('--device', metavar='ADDRESS',
                            help='only the device at this PCI address')
        hostargs.add_nodename(parser)
        placement.register_argparse(parser)
        return parser

    def take_action(self, parsed_args):
        known_driver(parsed_args.driver)
        conf = hostargs.conf(self.app)
        if parsed_args.qat_services is not None:
            return self._services(conf, parsed_args)
        if parsed_args.num_vfs < 0:
            raise lifecycle.LifecycleError('--num-vfs must be 0 or more')

        def set_num_vfs(address, count):
            from privsep import pci
            return pci.set_num_vfs(address, count)
        self._update(conf, parsed_args, lifecycle.update_vfs,
                     parsed_args.num_vfs, set_num_vfs)

    def _services(self, conf, parsed_args):
        def set_services(address, services):
            return lifecycle.apply_setting(conf, parsed_args.driver,
                                           'services', address, services)

        def update(conf, store, nodename, name, value, *args):
            return lifecycle.update_setting(conf, store, nodename, name,
                                            'services', value, *args)
        self._update(conf, parsed_args, update, parsed_args.qat_services,
                     set_services)

    def _update(self, conf, parsed_args, update, value, privileged_write):
        """Run ``update`` with ``privileged_write`` as its write.

        The privsep daemon is started only once a write is due, so a
        refusal before it costs no daemon.
        """
        client = hostargs.placement_client(self.app, parsed_args)

        def write(address, wanted):
            privileged.start_privsep(conf, 'sysfs_admin')
            return privileged_write(address, wanted)
        done = update(
            conf, hostargs.store(conf), parsed_args.nodename,
            parsed_args.driver, value, hostargs.allocations_lookup(client),
            write, parsed_args.device)
        for line in done:
            self.app.stdout.write(line + '\n')
