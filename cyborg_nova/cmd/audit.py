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

"""``cyborg-nova audit``: Placement, the unit store and the guests agree?

Also runnable before the ``cyborg_nova.cli`` entry points are installed:
``python -m cyborg_nova.cmd.audit audit``.
"""

from __future__ import annotations

import sys
import time

from cliff import lister

from cyborg_drivers import base
from cyborg_drivers import guest_xml
from cyborg_drivers import sysfs
from cyborg_nova import assignments
from cyborg_nova import audit
from cyborg_nova.cmd import cli
from cyborg_nova.cmd import columns
from cyborg_nova.cmd import hostargs
from cyborg_nova.hotplug import guest as hotplug_guest
from cyborg_nova import lifecycle
from cyborg_nova import placement
from cyborg_nova import provider_devices
from cyborg_nova import providers as providers_lib
from cyborg_nova import remote_devices

_COLUMNS = ('kind', 'device', 'provider', 'consumer', 'units', 'message')


class AuditError(Exception):
    """The audit could not run; the message says why, on one line."""


class _KeepLines:
    """Help formatter mix-in: the description's lines are kept."""

    def _fill_text(self, text, width, indent):
        return ''.join(indent + line
                       for line in text.splitlines(keepends=True))


def node_providers(client, nodename: str) -> dict[str, str]:
    """{provider uuid: PCI address} of ``nodename``'s accelerators.

    :raises AuditError: Placement has no compute node of that name.
    :raises placement.PlacementError: Placement is unreachable.
    """
    api = placement.Client(client)
    roots = api.providers(name=nodename)
    if not roots:
        raise AuditError(
            'no compute node %r in Placement; --nodename is nova-compute\'s '
            'hypervisor hostname (default: this host\'s name)' % nodename)
    root = roots[0]['uuid']
    children = [rp for rp in api.providers(in_tree=root)
                if rp['parent_provider_uuid'] == root]
    found = {}
    # Local devices' providers and those of out-of-process drivers'.
    for infix in (providers_lib.NAME_INFIX, remote_devices.NAME_INFIX):
        prefix = nodename + infix
        found.update((rp['uuid'], rp['name'][len(prefix):])
                     for rp in children if rp['name'].startswith(prefix))
    return found


def provider_allocations(client, rp_uuids) -> dict[str, dict[str, int]]:
    """{provider: {consumer: amount}}, as Nova's report client sums it.

    :raises placement.PlacementError: Placement is unreachable or
        refused.
    """
    api = placement.Client(client)
    found = {}
    for rp in rp_uuids:
        body = api.provider_allocations(rp)
        found[rp] = {consumer: sum(alloc.get('resources', {}).values())
                     for consumer, alloc in body['allocations'].items()}
    return found


def domain_hostdevs(uri: str) -> dict[str, list[str]]:
    """{domain uuid: PCI hostdev addresses}, live XML and definition.

    :raises AuditError: libvirt is not installed, unreachable or fails.
    """
    try:
        import libvirt
    except ImportError:
        raise AuditError('libvirt-python is not installed here; install it '
                         '(nova-compute uses it) to audit the guests')
    # Errors are reported through exceptions; the default handler would
    # also print each one on stderr.
    libvirt.registerErrorHandler(lambda ctx, err: None, None)
    try:
        conn = libvirt.open(uri)
    except libvirt.libvirtError as exc:
        raise AuditError('cannot connect to libvirt at %s: %s'
                         % (uri, guest_xml.libvirt_reason(exc)))
    found = {}
    try:
        for dom in conn.listAllDomains(0):
            try:
                addresses = []
                # A running guest may differ from its definition (a
                # device hot-plugged live only): both count.
                if dom.isActive():
                    addresses += audit.hostdev_addresses(
                        guest_xml.domain_xml(dom, 0))
                if dom.isPersistent():
                    addresses += audit.hostdev_addresses(guest_xml.domain_xml(
                        dom, libvirt.VIR_DOMAIN_XML_INACTIVE))
                found[dom.UUIDString()] = sorted(set(addresses))
            except libvirt.libvirtError as exc:
                if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                    continue  # undefined since it was listed
                raise
    except libvirt.libvirtError as exc:
        raise AuditError('cannot read the domains of libvirt at %s: %s'
                         % (uri, guest_xml.libvirt_reason(exc)))
    finally:
        conn.close()
    return found


def discovered_units(conf, store, nodename: str) -> dict[str, str] | None:
    """{unit address: provider uuid} discovery finds; None if it cannot."""
    try:
        found = lifecycle.host_accelerators(conf, store).accelerators
    except (base.DriverError, sysfs.NoSysfs):
        return None
    return {unit: rp for rp, device in provider_devices.found(
        store, nodename, found).items()
        for unit in device.accelerator.units}


class Audit(hostargs.HostCommand, lister.Lister):
    """Check that Placement, the unit store and the guests agree.

    For the accelerator providers of --nodename, reads their allocations
    in Placement (the truth of who holds how much), the unit rows of the
    host's state store (which PCI functions serve each allocation) and
    the PCI hostdevs of every libvirt domain, running or only defined
    (what each guest is given). One row per inconsistency:

    double-assignment
        a unit is a hostdev of two domains, or a domain has a unit the
        store gives to another instance.
    orphan-unit
        the store gives units of a provider to a consumer that holds
        nothing of that provider in Placement.
    missing-units
        a consumer holds N of a provider in Placement but the store
        records fewer units for it (extra-units: more than N).
    unallocated-device
        a domain has a unit of an accelerator as a hostdev that no
        allocation of that instance is served by.
    held-unit-in-guest
        a unit held back from the next guest (for its scrub,
        one-time-use, a failed scrub) is a hostdev of a domain: its
        scrub would reset a function a guest may use.
    held-unit
        not a disagreement: a unit held back from the next guest, with
        why (being scrubbed, one-time-use, its scrub failed and the
        reason) and since when. These rows do not change the exit
        status.
    aer-errors
        not a disagreement: the PCIe AER error counts of an
        accelerator's functions grew since the operator last cleared
        them (device-set-state ready), or took an effect (inform,
        fence) not cleared yet; the message gives the counts and the
        effect. These rows do not change the exit status.

    A consumer that is not a domain is a migration record: during a
    resize it holds the units of the stopped guest, which is not
    reported. With --fix, orphan units that no domain has as a hostdev
    are released; every other finding is left alone and its "fix"
    column says why. Exit status 0 when everything agrees, 1 when an
    inconsistency is found (with --fix: one remains) or the records
    cannot be read. Placement credentials as for "cyborg-nova tree".
    """

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.formatter_class = type(
            'Formatter', (_KeepLines, parser.formatter_class), {})
        hostargs.add_nodename(parser)
        parser.add_argument(
            '--fix', action='store_true',
            help='release orphan units no libvirt domain has as a hostdev '
                 '(the only change this command makes); say why each '
                 'other finding is left alone')
        parser.add_argument(
            '--libvirt-uri', default=hotplug_guest.DEFAULT_URI,
            metavar='<uri>',
            help='libvirt connection URI, as [libvirt] connection_uri of '
                 'nova-compute (default: %(default)s)')
        placement.register_argparse(parser)
        return parser

    def take_action(self, parsed_args):
        conf = hostargs.conf(self.app)
        nodename = parsed_args.nodename
        started = time.time()
        client = hostargs.placement_client(self.app, parsed_args)
        devices = node_providers(client, nodename)
        # Only --fix writes: otherwise the store is only read (never
        # created or migrated).
        store = (hostargs.existing_store(conf) if parsed_args.fix
                 else hostargs.read_store(conf))
        # Guests, then rows, then allocations: the reverse of the order
        # a build writes them in, so a guest built while this runs
        # never looks inconsistent.
        hostdevs = domain_hostdevs(parsed_args.libvirt_uri)
        if store is not None:
            devices.update(provider_devices.known(store, nodename))
        rows = [row for row in (assignments.Assignments(store).all()
                                if store is not None else [])
                if row.provider in devices]
        allocations = provider_allocations(client, sorted(devices))
        units = discovered_units(conf, store, nodename)
        if units is None:
            self.app.stderr.write(
                'warning: cannot discover this host\'s accelerators; only '
                'units the store records are checked in the guests\n')
            units = {}
        holds = [h for h in (store.units.holds() if store is not None
                             else []) if h.provider in devices]
        findings = audit.audit(allocations, rows, hostdevs, units, devices,
                               held=[h.unit for h in holds])
        # The guests again, after the holds: a delete undefines its guest
        # before it holds the units, so a guest read before the hold may
        # be gone by now.
        findings += audit.held_findings(
            holds, domain_hostdevs(parsed_args.libvirt_uri) if holds
            else hostdevs, devices)
        if store is not None:
            counters = store.aer.counters(nodename)
            effects = store.aer.effects(nodename)
            findings += audit.aer_findings(counters, effects, {
                a: providers_lib.provider_uuid(nodename, a)
                for a in set(counters) | set(effects)})
        outcome = {}
        if parsed_args.fix:
            outcome = self._fix(store, findings, hostdevs, started)
        self.remaining = [f for f in findings
                          if f.kind in audit.INCONSISTENCIES
                          and not outcome.get(f, '').startswith('fixed')]
        self.summary = self._summary(findings, parsed_args.fix, devices,
                                     rows, hostdevs)
        names = _COLUMNS + (('fix',) if parsed_args.fix else ())
        return names, [
            (f.kind, devices.get(f.provider, ''), f.provider, f.consumer,
             columns.ListColumn(f.units), f.message)
            + ((outcome[f],) if parsed_args.fix else ())
            for f in findings]

    @staticmethod
    def _fix(store, findings, hostdevs, started) -> dict:
        """{finding: 'fixed: ...' or 'not fixed: ...'}."""
        releases, left = audit.plan_fix(findings, hostdevs)
        outcome = {f: 'not fixed: %s' % why for f, why in left.items()}
        done = {}
        for release in releases:
            # Only rows older than this run: one assigned since may
            # serve an allocation this run did not see.
            freed = assignments.Assignments(store).release(
                release.consumer, release.provider, created_before=started)
            done[(release.consumer, release.provider)] = (
                'fixed: released %s' % ', '.join(release.units)
                if freed == len(release.units) else
                'not fixed: %d of %d unit(s) released; the rows changed '
                'while this ran, run audit again'
                % (freed, len(release.units)))
        for finding in findings:
            if finding not in outcome:
                outcome[finding] = done[(finding.consumer,
                                         finding.provider)]
        return outcome

    def _summary(self, findings, fix, devices, rows, hostdevs) -> str:
        checked = '%d accelerator provider(s), %d unit row(s), %d ' \
            'domain(s) checked' % (len(devices), len(rows), len(hostdevs))
        errors = sum(f.kind == audit.AER_ERRORS for f in findings)
        if errors:
            checked += '; %d accelerator(s) with PCIe AER errors' % errors
        held = sum(f.kind == audit.HELD_UNIT for f in findings)
        if held:
            checked += '; %d unit(s) held back from the next guest' % held
        findings = [f for f in findings
                    if f.kind in audit.INCONSISTENCIES]
        if not findings:
            return 'no inconsistencies: %s' % checked
        found = '%d %s found' % (len(findings), 'inconsistency' if len(
            findings) == 1 else 'inconsistencies')
        if fix:
            return '%s, %d fixed, %d remain: %s' % (
                found, len(findings) - len(self.remaining),
                len(self.remaining), checked)
        return '%s: %s' % (found, checked)

    def run(self, parsed_args):
        try:
            status = super().run(parsed_args)
        except placement.PlacementError as exc:
            # keystoneauth's reasons can span lines; the error is one.
            raise AuditError(' '.join(str(exc).split()))
        # After the table in a table, on stderr otherwise: JSON, YAML
        # and CSV stay parseable.
        out = (self.app.stdout if parsed_args.formatter == 'table'
               else self.app.stderr)
        out.write(self.summary + '\n')
        return 1 if self.remaining else status


COMMANDS = {'audit': Audit}


def main(argv: list[str] | None = None) -> int:
    """``cyborg-nova``, with this command even if not installed yet."""
    app = cli.CyborgNovaApp()
    for name, command in COMMANDS.items():
        app.command_manager.add_command(name, command)
    return app.run(sys.argv[1:] if argv is None else argv)


if __name__ == '__main__':
    sys.exit(main())
