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

"""``device-list``, ``device-show``, ``device-set-state``.

``service-list`` is in :mod:`cyborg_nova.cmd.services`.
"""

from cliff import command
from cliff import lister
from cliff import show

from cyborg_nova.cmd import columns
from cyborg_nova.cmd import errors
from cyborg_nova.cmd import hostargs
from cyborg_nova import health
from cyborg_nova import lifecycle
from cyborg_nova import providers
from cyborg_nova import scrub
from cyborg_nova import store as state_store


def _found(conf, store):
    return lifecycle.host_accelerators(conf, store).by_address()


def _holds(store, nodename, address):
    """The held units of the device at ``address`` (see scrub)."""
    return store.units.holds(provider=providers.provider_uuid(nodename,
                                                              address))


def _hold_line(hold):
    return '%s: %s since %s%s' % (
        hold.unit, hold.state, scrub.held_since(hold),
        ' (%s)' % hold.reason if hold.reason else '')


_LIST_COLUMNS = ('address', 'driver', 'state', 'reason', 'present',
                 'reserved', 'problems', 'provider_uuid', 'held_units')


class DeviceList(hostargs.HostCommand, lister.Lister):
    """List this host's accelerators with their lifecycle state.

    State comes from the host's state store (shared with nova-compute);
    "present" says whether discovery finds the device now; "reserved"
    whether its provider is held back from scheduling, as nova-compute
    computes it; "held_units" how many of its units a guest freed are
    held back, scrubbing or waiting for the operator (device-show lists
    them). Reads the store without creating or migrating it.
    """

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        hostargs.add_nodename(parser)
        return parser

    def take_action(self, parsed_args):
        conf = hostargs.conf(self.app)
        store = hostargs.read_store(conf)
        if store is None:
            self.app.stderr.write('no devices recorded: %s\n'
                                  % hostargs.missing_store(conf))
            return _LIST_COLUMNS, []
        nodename = parsed_args.nodename
        recorded = store.devices(nodename)
        if not recorded:
            # Another host's name, or a mistyped one: say which it knows.
            errors.require_host(conf, store, nodename)
            self.app.stderr.write(
                'no devices recorded for host %s: the list is empty '
                '(nova-compute records them at its updates)\n' % nodename)
            return _LIST_COLUMNS, []
        found = _found(conf, store)
        rows = []
        for address, row in sorted(recorded.items()):
            accelerator = found.get(address)
            rows.append((
                address, row.driver, row.state, row.reason or '',
                accelerator is not None,
                bool(providers.reserved(row.state, accelerator, 1)),
                columns.ListColumn(accelerator.problems
                                   if accelerator else []),
                providers.provider_uuid(nodename, address),
                len(_holds(store, nodename, address))))
        return _LIST_COLUMNS, rows


class DeviceShow(hostargs.HostCommand, show.ShowOne):
    """Show one accelerator: state, provider, loaded function, last job.

    "state" and "reason" come from the host's state store; "reserved"
    says whether nova-compute holds the provider back from scheduling; a
    device whose programming failed shows state "failed", the job in
    "reason" and "last_program" (its provider also carries the
    CUSTOM_FPGA_PROGRAMMING_FAILED trait). Reads the store without
    creating or migrating it.
    """

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('address', help='PCI address of the device')
        hostargs.add_nodename(parser)
        return parser

    def take_action(self, parsed_args):
        from cyborg_nova import programming

        conf = hostargs.conf(self.app)
        store = hostargs.read_store(conf)
        nodename, address = parsed_args.nodename, parsed_args.address
        if store is None:
            raise lifecycle.LifecycleError('no device %s on %s: %s' % (
                address, nodename, hostargs.missing_store(conf)))
        row = store.devices(nodename).get(address)
        if row is None:
            raise lifecycle.LifecycleError('no device %s on %s; %s' % (
                address, nodename, errors.host_hint(conf, store, nodename)
                or 'see "cyborg-nova device-list"'))
        accelerator = _found(conf, store).get(address)
        jobs = programming.Journal(store).jobs(nodename, address, 1)
        last = ('%s %s (%s)%s' % (jobs[0].id, jobs[0].status, jobs[0].step,
                                  ': %s' % jobs[0].error
                                  if jobs[0].error else '')
                if jobs else '')
        data = {
            'address': address,
            'driver': row.driver,
            'state': row.state,
            'reason': row.reason or '',
            'present': accelerator is not None,
            'reserved': bool(providers.reserved(row.state, accelerator, 1)),
            'resource_class': accelerator.resource_class
            if accelerator else '',
            'traits': columns.ListColumn(accelerator.traits
                                         if accelerator else []),
            'functions': columns.ListColumn(
                ['%s: %s' % (r.name, r.function_id or 'none')
                 for r in (accelerator.fpga_regions if accelerator else ())]),
            'problems': columns.ListColumn(accelerator.problems
                                           if accelerator else []),
            'provider_uuid': providers.provider_uuid(nodename, address),
            'provider_name': providers.provider_name(nodename, address),
            'last_program': last,
            'held_units': columns.ListColumn(
                [_hold_line(h) for h in _holds(store, nodename, address)]),
        }
        return tuple(data), tuple(data.values())


class DeviceSetState(hostargs.HostCommand, command.Command):
    """Set an accelerator's lifecycle state (e.g. mark it ready).

    States: inactive, ready, unhealthy, held, programming, failed. Only a
    ready device is offered to the scheduler; nova-compute applies the
    change at its next update. Setting a device ready also clears the
    effect its PCIe AER errors had: its error counts now become the
    counts later errors are counted from.

    A unit a guest freed that is held back (a one-time-use unit, or one
    whose scrub failed; device-show lists them) is given back with
    "device-set-state <unit address> ready"; a unit still being scrubbed
    is refused. A unit whose scrub failed also fenced its device: mark
    the device ready too.
    """

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('address', help='PCI address of the device, '
                            'or of a held unit (with state "ready")')
        parser.add_argument('state', choices=state_store.STATES)
        parser.add_argument('--reason', help='free text, shown by '
                                             'device-list')
        hostargs.add_nodename(parser)
        return parser

    def take_action(self, parsed_args):
        conf = hostargs.conf(self.app)
        store = hostargs.store(conf)
        hold = store.units.hold(parsed_args.address)
        if hold is not None:
            if parsed_args.state != state_store.READY:
                raise lifecycle.LifecycleError(
                    '%s is a unit held back (%s): it can only be marked '
                    'ready' % (parsed_args.address, hold.state))
            try:
                scrub.mark_ready(store, parsed_args.address)
            except scrub.MarkRefused as exc:
                raise lifecycle.LifecycleError(str(exc))
            self.app.stdout.write(
                'unit %s (%s) is free again; nova-compute reports it '
                'unreserved at its next update\n'
                % (parsed_args.address, hold.state))
            if parsed_args.address not in store.devices(
                    parsed_args.nodename):
                return
        if parsed_args.state == state_store.READY:
            # Before the state: the effect cleared first is not taken
            # again by a discovery that sees the device ready meanwhile.
            health.acknowledge(store, parsed_args.nodename,
                               parsed_args.address,
                               conf.cyborg_nova.sysfs_root)
        try:
            store.set_state(parsed_args.nodename, parsed_args.address,
                            parsed_args.state, parsed_args.reason)
        except KeyError:
            raise lifecycle.LifecycleError('no device %s on %s; %s' % (
                parsed_args.address, parsed_args.nodename,
                errors.host_hint(conf, store, parsed_args.nodename)
                or 'see "cyborg-nova device-list"'))
        self.app.stdout.write('%s is now %s\n' % (parsed_args.address,
                                                  parsed_args.state))
