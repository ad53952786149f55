"""``install-driver`` and ``uninstall-driver`` (the generic-driver spec)."""

from cliff import command

from cyborg_nova.cmd import hostargs
from cyborg_nova import lifecycle
from cyborg_nova import placement


class InstallDriver(command.Command):
    """Enable an accelerator driver on this host and ready its devices.

    Runs the driver's setup for each device it finds (e.g. binding to
    vfio-pci or enabling VFs, where the driver has such a step), records
    the driver as installed in the host's state store (overriding
    [cyborg_nova] enabled_drivers; nova.conf is not edited) and marks its
    devices ready. nova-compute reports them at its next update.
    """

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('driver', help='driver name (driver-list)')
        hostargs.add_nodename(parser)
        return parser

    def take_action(self, parsed_args):
        conf = self.app.conf
        done = lifecycle.install(conf, hostargs.store(conf),
                                 parsed_args.nodename, parsed_args.driver)
        for line in done:
            self.app.stdout.write(line + '\n')
        self.app.stdout.write('driver %s installed: %d device(s) ready\n'
                              % (parsed_args.driver, len(done)))


class UninstallDriver(command.Command):
    """Disable an accelerator driver on this host.

    Refused while any of its devices holds allocations in Placement (the
    message names the instances). Otherwise its devices are held (fully
    reserved at nova-compute's next update), torn down, and their
    providers removed by nova-compute's following updates. Placement
    credentials as for "cyborg-nova tree".
    """

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('driver', help='driver name (driver-list)')
        hostargs.add_nodename(parser)
        placement.register_argparse(parser)
        return parser

    def take_action(self, parsed_args):
        conf = self.app.conf
        client = hostargs.placement_client(self.app, parsed_args)
        done = lifecycle.uninstall(
            conf, hostargs.store(conf), parsed_args.nodename,
            parsed_args.driver, hostargs.allocations_lookup(client))
        for line in done:
            self.app.stdout.write(line + '\n')
        self.app.stdout.write('driver %s uninstalled\n'
                              % parsed_args.driver)
