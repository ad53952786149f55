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

"""Do Placement, the unit store and the libvirt guests of a host agree?

Three records say who holds an accelerator's units (see
:mod:`cyborg_nova.hotplug.flow`): Placement's allocations (the truth of who
holds how much of each provider), the host's unit rows (which PCI
functions serve each allocation) and the guests' PCI ``<hostdev>``
elements (what each guest is given). :func:`audit` compares them and
lists every disagreement as a :class:`Finding`; :func:`plan_fix` says
which of those may be repaired without risk. :func:`aer_findings` adds
the devices whose PCIe AER error counts grew since the operator last
cleared them, with the effect they had, and :func:`held_findings` the
units held back from the next guest (for their scrub, one-time-use, a
failed scrub): not disagreements, but what an operator auditing a host
has to look at -- except a held unit a guest still has, which is one.
Nothing here reads or writes anything: the ``cyborg-nova audit`` command
gathers the records and applies the plan.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Mapping
from xml.etree import ElementTree

from cyborg_nova import assignments as assignments_lib
from cyborg_nova import scrub
from cyborg_nova.store import health as health_table
from cyborg_nova.store import units as unit_store

DOUBLE_ASSIGNMENT = 'double-assignment'
ORPHAN_UNIT = 'orphan-unit'
MISSING_UNITS = 'missing-units'
EXTRA_UNITS = 'extra-units'
UNALLOCATED_DEVICE = 'unallocated-device'
HELD_IN_GUEST = 'held-unit-in-guest'
AER_ERRORS = 'aer-errors'
HELD_UNIT = 'held-unit'
#: The kinds that are disagreements between the records.
INCONSISTENCIES = (DOUBLE_ASSIGNMENT, ORPHAN_UNIT, MISSING_UNITS,
                   EXTRA_UNITS, UNALLOCATED_DEVICE, HELD_IN_GUEST)
KINDS = INCONSISTENCIES + (AER_ERRORS, HELD_UNIT)

#: {provider uuid: {consumer uuid: amount allocated}}
Allocations = Mapping[str, Mapping[str, int]]
#: {libvirt domain uuid (= instance uuid): [PCI addresses of its hostdevs]}
Hostdevs = Mapping[str, Iterable[str]]


@dataclasses.dataclass(frozen=True)
class Finding:
    """One disagreement between the three records."""

    kind: str
    provider: str
    #: The instance, migration record or domain the finding is about.
    consumer: str
    units: tuple[str, ...]
    message: str


@dataclasses.dataclass(frozen=True)
class Release:
    """Rows :func:`plan_fix` found safe to delete."""

    consumer: str
    provider: str
    units: tuple[str, ...]


def hostdev_addresses(domain: str | ElementTree.Element) -> list[str]:
    """The units a domain XML holds: PCI hostdevs and mdev hostdevs.

    :param domain: the XML, as text or parsed.
    :returns: PCI addresses in the form discovery and the unit rows use
        (``0000:70:00.1``), then mdev uuids (lowercase), so they compare
        as strings.
    """
    # The local libvirtd's own description of a domain, not a user's
    # input; and the expat Python ships refuses entity-expansion bombs.
    root = (ElementTree.fromstring(domain)  # nosec B314
            if isinstance(domain, str) else domain)
    found = []
    for source in root.iterfind(
            "./devices/hostdev[@type='pci']/source/address"):
        try:
            domain, bus, slot, function = (
                int(source.get(k), 16)
                for k in ('domain', 'bus', 'slot', 'function'))
        except (TypeError, ValueError):
            continue
        address = '%04x:%02x:%02x.%x' % (domain, bus, slot, function)
        if address not in found:
            found.append(address)
    # A vGPU that is a mediated device: its unit is the mdev's uuid.
    for source in root.iterfind(
            "./devices/hostdev[@type='mdev']/source/address"):
        mdev = (source.get('uuid') or '').lower()
        if mdev and mdev not in found:
            found.append(mdev)
    return found


def audit(allocations: Allocations,
          rows: Iterable[assignments_lib.Assignment],
          hostdevs: Hostdevs,
          units: Mapping[str, str],
          devices: Mapping[str, str] | None = None,
          held: Iterable[str] = ()) -> list[Finding]:
    """Every disagreement, sorted by provider, consumer and kind.

    :param allocations: what Placement allocates on each accelerator
        provider of the host ({} for a provider nobody holds).
    :param rows: the unit rows of those providers.
    :param hostdevs: the PCI hostdevs of every domain on the host,
        running or only defined.
    :param units: the host's accelerator units, PCI address -> provider
        uuid. The units of ``rows`` count too, whatever this says.
    :param devices: provider uuid -> the accelerator's PCI address, to
        name accelerators so in the messages.
    :param held: the units held back from the next guest: a guest that
        has one is :func:`held_findings`' to report.

    A consumer that is not a domain is taken for a migration record:
    during a resize it legitimately holds the units of a stopped guest,
    so a domain using those is not reported; the migration's rows are
    still checked against Placement like any other.
    """
    rows = list(rows)
    unit_provider = dict(units)
    unit_provider.update((row.unit, row.provider) for row in rows)
    domains = {d: set(addresses) for d, addresses in hostdevs.items()}
    names = {rp: 'accelerator %s' % address
             for rp, address in (devices or {}).items()}
    findings = _against_placement(allocations, rows, domains, names)
    held = set(held)
    findings += _against_guests(
        rows, domains, {u: rp for u, rp in unit_provider.items()
                        if u not in held}, names)
    return sorted(findings, key=lambda f: (f.provider, f.consumer,
                                           KINDS.index(f.kind), f.units))


def _name(names: dict[str, str], provider: str) -> str:
    return names.get(provider) or 'provider %s' % provider


def _held_by(domains: dict[str, set[str]], units: Iterable[str]
             ) -> list[str]:
    return sorted(d for d, have in domains.items()
                  if have.intersection(units))


def _against_placement(allocations: Allocations,
                       rows: list[assignments_lib.Assignment],
                       domains: dict[str, set[str]],
                       names: dict[str, str]) -> list[Finding]:
    """orphan-unit, missing-units and extra-units."""
    recorded: dict[tuple[str, str], list[str]] = {}
    for row in rows:
        recorded.setdefault((row.provider, row.consumer), []).append(
            row.unit)
    findings = []
    for (provider, consumer), held in sorted(recorded.items()):
        held = sorted(held)
        amount = allocations.get(provider, {}).get(consumer, 0)
        if amount:
            continue
        users = _held_by(domains, held)
        findings.append(Finding(
            ORPHAN_UNIT, provider, consumer, tuple(held),
            'the store gives %s to %s, which holds nothing of %s in '
            'Placement%s' % (
                ', '.join(held), consumer, _name(names, provider),
                '' if not users else '; its guest still has them'
                if users == [consumer] else
                '; still a hostdev of domain %s' % ', '.join(users))))
    for provider, holders in sorted(allocations.items()):
        for consumer, amount in sorted(holders.items()):
            held = tuple(sorted(recorded.get((provider, consumer), [])))
            if len(held) < amount:
                findings.append(Finding(
                    MISSING_UNITS, provider, consumer, held,
                    '%s holds %d of %s in Placement but the store records '
                    '%d unit(s) for it%s' % (
                        consumer, amount, _name(names, provider), len(held),
                        ' (%s)' % ', '.join(held) if held else '')))
            elif amount and len(held) > amount:
                findings.append(Finding(
                    EXTRA_UNITS, provider, consumer, held,
                    '%s holds %d of %s in Placement but the store records '
                    '%d unit(s) for it (%s)' % (
                        consumer, amount, _name(names, provider), len(held),
                        ', '.join(held))))
    return findings


def _against_guests(rows: list[assignments_lib.Assignment],
                    domains: dict[str, set[str]],
                    unit_provider: dict[str, str],
                    names: dict[str, str]) -> list[Finding]:
    """double-assignment and unallocated-device."""
    owner = {row.unit: row.consumer for row in rows}
    findings = []
    for unit, provider in sorted(unit_provider.items()):
        users = [d for d in sorted(domains) if unit in domains[d]]
        if not users:
            continue
        recorded = owner.get(unit)
        if recorded is not None and recorded not in domains:
            # A migration record's unit in a (stopped) guest: a resize
            # in progress, unless two guests have it.
            intruders = users if len(users) > 1 else []
        else:
            intruders = [d for d in users if d != recorded]
        for domain in intruders:
            others = [d for d in users if d != domain]
            if others or recorded is not None:
                findings.append(Finding(
                    DOUBLE_ASSIGNMENT, provider, domain, (unit,),
                    'unit %s of %s is a hostdev of domain %s%s; %s' % (
                        unit, _name(names, provider), domain,
                        ' and of %s' % ', '.join(others) if others else '',
                        'the store gives it to %s' % recorded
                        if recorded is not None
                        else 'the store gives it to no one')))
            else:
                findings.append(Finding(
                    UNALLOCATED_DEVICE, provider, domain, (unit,),
                    'domain %s has unit %s of %s as a hostdev, but no '
                    'allocation of %s is served by it (the store gives it '
                    'to no one)' % (domain, unit, _name(names, provider),
                                    domain)))
    return findings


def aer_findings(counters: Mapping[str, Iterable[health_table.Counter]],
                 effects: Mapping[str, health_table.Effect],
                 providers: Mapping[str, str]) -> list[Finding]:
    """A finding per device with AER counts above their baseline.

    Or with an effect recorded (it stays until cleared, even where the
    counts were acknowledged some other way). ``units`` are the functions
    above their baseline; the message gives their counts since the
    baseline and the device's effect (``none`` when the counts took
    none).

    :param counters: {device: its rows}, as the state store has them.
    :param effects: {device: its effect}, as the state store has them.
    :param providers: {device: its provider uuid}.
    """
    findings = []
    for device in sorted(set(counters) | set(effects)):
        grown: dict[str, list[str]] = {}
        for row in counters.get(device, ()):
            if row.last > row.baseline:
                grown.setdefault(row.function, []).append(
                    '%s %d' % (row.severity, row.last - row.baseline))
        effect = effects.get(device)
        if not grown and effect is None:
            continue
        findings.append(Finding(
            AER_ERRORS, providers.get(device, ''), '', tuple(sorted(grown)),
            'PCIe AER errors on accelerator %s since its baseline: %s; '
            'effect %s' % (
                device, '; '.join('%s: %s' % (f, ', '.join(counts))
                                  for f, counts in sorted(grown.items()))
                or 'none now',
                '%s (%s)' % (effect.effect, effect.reason) if effect
                else 'none')))
    return findings


def held_findings(holds: Iterable[unit_store.Hold], hostdevs: Hostdevs,
                  devices: Mapping[str, str] | None = None
                  ) -> list[Finding]:
    """A finding per unit held back from the next guest.

    ``held-unit`` says why and since when; ``held-unit-in-guest`` (an
    inconsistency) that a domain still has the unit as a hostdev, so its
    scrub would reset a function a guest uses.

    :param holds: the holds of the host's providers, as the store has
        them.
    """
    domains = {d: set(addresses) for d, addresses in hostdevs.items()}
    names = {rp: 'accelerator %s' % address
             for rp, address in (devices or {}).items()}
    findings = []
    for hold in holds:
        since = scrub.held_since(hold)
        what = 'unit %s of %s' % (hold.unit, _name(names, hold.provider))
        users = _held_by(domains, [hold.unit])
        if users:
            findings.append(Finding(
                HELD_IN_GUEST, hold.provider, users[0], (hold.unit,),
                '%s is held back (%s since %s) but is a hostdev of domain '
                '%s: its scrub would reset it under the guest'
                % (what, hold.state, since, ', '.join(users))))
        findings.append(Finding(
            HELD_UNIT, hold.provider, hold.consumer or '', (hold.unit,),
            '%s is held back since %s: %s' % (what, since, {
                unit_store.SCRUBBING: 'being scrubbed',
                unit_store.USED: 'one-time-use, it waits for '
                                 '"cyborg-nova device-set-state %s ready"'
                                 % hold.unit,
                unit_store.FAILED: 'its scrub failed: %s' % hold.reason,
            }.get(hold.state, hold.state))))
    return findings


def plan_fix(findings: Iterable[Finding], hostdevs: Hostdevs
             ) -> tuple[list[Release], dict[Finding, str]]:
    """What ``--fix`` may do: the rows to delete, and why not the rest.

    Only orphan units are ever released, and only when no domain has
    one of them as a hostdev: a unit still in a guest's definition is in
    use (or will be at its next start), and freeing it would let Nova
    give the same function to another instance.

    :returns: the releases, and {finding left alone: the reason}.
    """
    domains = {d: set(addresses) for d, addresses in hostdevs.items()}
    releases: list[Release] = []
    left: dict[Finding, str] = {}
    for finding in findings:
        why = _why_not(finding, domains)
        if why is None:
            releases.append(Release(finding.consumer, finding.provider,
                                    finding.units))
        else:
            left[finding] = why
    return releases, left


def _why_not(finding: Finding, domains: dict[str, set[str]]) -> str | None:
    if finding.kind == ORPHAN_UNIT:
        users = _held_by(domains, finding.units)
        if not users:
            return None
        return ('domain %s still has %s as a hostdev; detach it from the '
                'guest (or delete the instance) first'
                % (', '.join(users), ', '.join(finding.units)))
    return _LEFT_ALONE[finding.kind]


_LEFT_ALONE = {
    DOUBLE_ASSIGNMENT: 'which guest should keep the function is for an '
                       'operator to decide; detach it from the other '
                       '(instance-detach, or edit its definition)',
    MISSING_UNITS: 'nova-compute assigns missing units when it next '
                   'builds the guest (hard reboot the instance)',
    EXTRA_UNITS: 'the guest may use every one of them; hard reboot the '
                 'instance to bring its units back to its allocation',
    UNALLOCATED_DEVICE: 'a guest uses a function nothing pays for; '
                        'detach it from the guest, or attach the device '
                        'to the instance properly (instance-attach)',
    HELD_IN_GUEST: 'the guest may be using the function: detach it from '
                   'the guest (instance-detach, or edit its definition); '
                   'the scrub then runs',
    HELD_UNIT: 'a held unit comes back by itself after its scrub; a '
               'one-time-use unit, or one whose scrub failed, once the '
               'operator runs cyborg-nova device-set-state <unit> ready',
    AER_ERRORS: 'hardware errors are for an operator to judge; once the '
                'device is checked, cyborg-nova device-set-state '
                '<address> ready clears them (its counts now become the '
                'baseline)',
}
