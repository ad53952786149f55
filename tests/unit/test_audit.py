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

"""The audit of Placement, unit rows and guests: each kind, and clean."""

import time

import pytest

from cyborg_nova import assignments
from cyborg_nova import audit
from cyborg_nova.store import units as unit_store

RP = 'rp-qat-70'
OTHER_RP = 'rp-qat-6b'
VFS = ['0000:70:00.%d' % n for n in range(1, 5)]
OTHER_VFS = ['0000:6b:00.%d' % n for n in range(1, 3)]
UNITS = {**{vf: RP for vf in VFS}, **{vf: OTHER_RP for vf in OTHER_VFS}}
VM1, VM2, VM3 = 'vm-1', 'vm-2', 'vm-3'
MIGRATION = 'migration-1'


def row(unit, consumer, provider=RP):
    return assignments.Assignment(unit, consumer, provider, 1.0)


def clean():
    """VM1 holds two VFs, VM2 one of the other PF; all three agree."""
    allocations = {RP: {VM1: 2}, OTHER_RP: {VM2: 1}}
    rows = [row(VFS[0], VM1), row(VFS[1], VM1),
            row(OTHER_VFS[0], VM2, OTHER_RP)]
    hostdevs = {VM1: VFS[:2], VM2: [OTHER_VFS[0]], VM3: []}
    return allocations, rows, hostdevs


def kinds(findings):
    return [(f.kind, f.provider, f.consumer, f.units) for f in findings]


def test_clean_host_has_no_findings():
    allocations, rows, hostdevs = clean()
    assert audit.audit(allocations, rows, hostdevs, UNITS) == []


def test_nothing_anywhere_is_clean():
    assert audit.audit({RP: {}}, [], {}, UNITS) == []


def test_hostdevs_that_are_not_accelerator_units_are_ignored():
    allocations, rows, hostdevs = clean()
    hostdevs[VM3] = ['0000:00:04.0']
    assert audit.audit(allocations, rows, hostdevs, UNITS) == []


def test_orphan_unit():
    allocations, rows, hostdevs = clean()
    rows.append(row(VFS[3], VM3))
    findings = audit.audit(allocations, rows, hostdevs, UNITS)
    assert kinds(findings) == [(audit.ORPHAN_UNIT, RP, VM3, (VFS[3],))]
    assert findings[0].message == (
        'the store gives 0000:70:00.4 to vm-3, which holds nothing of '
        'provider rp-qat-70 in Placement')


def test_orphan_unit_still_in_a_guest_says_so():
    allocations, rows, hostdevs = clean()
    del allocations[RP][VM1]
    (finding,) = audit.audit(allocations, rows, hostdevs, UNITS)
    assert finding.kind == audit.ORPHAN_UNIT
    assert finding.units == tuple(VFS[:2])
    assert finding.message.endswith('; its guest still has them')


def test_orphan_unit_in_another_guest_names_it():
    allocations, rows, hostdevs = clean()
    rows.append(row(VFS[3], VM3))
    hostdevs[VM2] = hostdevs[VM2] + [VFS[3]]
    findings = audit.audit(allocations, rows, hostdevs, UNITS)
    # VM2's guest has a unit the store gives VM3 (sorted by consumer).
    assert [(f.kind, f.consumer) for f in findings] == [
        (audit.DOUBLE_ASSIGNMENT, VM2), (audit.ORPHAN_UNIT, VM3)]
    assert findings[1].message.endswith('; still a hostdev of domain vm-2')


def test_messages_name_the_accelerator_when_known():
    allocations, rows, hostdevs = clean()
    allocations[RP][VM3] = 1
    (finding,) = audit.audit(allocations, rows, hostdevs, UNITS,
                             {RP: '0000:70:00.0'})
    assert finding.message == (
        'vm-3 holds 1 of accelerator 0000:70:00.0 in Placement but the '
        'store records 0 unit(s) for it')


def test_missing_units():
    allocations, rows, hostdevs = clean()
    allocations[RP][VM3] = 2
    findings = audit.audit(allocations, rows, hostdevs, UNITS)
    assert kinds(findings) == [(audit.MISSING_UNITS, RP, VM3, ())]
    assert findings[0].message == (
        'vm-3 holds 2 of provider rp-qat-70 in Placement but the store '
        'records 0 unit(s) for it')


def test_fewer_units_than_allocated_are_missing_units():
    allocations, rows, hostdevs = clean()
    allocations[RP][VM1] = 3
    assert kinds(audit.audit(allocations, rows, hostdevs, UNITS)) == [
        (audit.MISSING_UNITS, RP, VM1, tuple(VFS[:2]))]


def test_extra_units():
    allocations, rows, hostdevs = clean()
    allocations[RP][VM1] = 1
    findings = audit.audit(allocations, rows, hostdevs, UNITS)
    assert kinds(findings) == [(audit.EXTRA_UNITS, RP, VM1, tuple(VFS[:2]))]


def test_unallocated_device():
    allocations, rows, hostdevs = clean()
    hostdevs[VM3] = [VFS[2]]
    findings = audit.audit(allocations, rows, hostdevs, UNITS)
    assert kinds(findings) == [
        (audit.UNALLOCATED_DEVICE, RP, VM3, (VFS[2],))]
    assert 'the store gives it to no one' in findings[0].message


def test_unit_of_a_row_counts_even_if_discovery_missed_it():
    allocations, rows, hostdevs = clean()
    # The device left the bus: discovery names none of its units.
    units = {vf: p for vf, p in UNITS.items() if p != OTHER_RP}
    hostdevs[VM3] = [OTHER_VFS[0]]
    assert kinds(audit.audit(allocations, rows, hostdevs, units)) == [
        (audit.DOUBLE_ASSIGNMENT, OTHER_RP, VM3, (OTHER_VFS[0],))]


def test_one_unit_in_two_guests_is_a_double_assignment():
    allocations, rows, hostdevs = clean()
    hostdevs[VM3] = [VFS[0]]
    findings = audit.audit(allocations, rows, hostdevs, UNITS)
    # Only the guest the store does not give it to is reported.
    assert kinds(findings) == [
        (audit.DOUBLE_ASSIGNMENT, RP, VM3, (VFS[0],))]
    assert findings[0].message == (
        'unit 0000:70:00.1 of provider rp-qat-70 is a hostdev of domain '
        'vm-3 and of vm-1; the store gives it to vm-1')


def test_two_guests_with_a_unit_nobody_holds_are_both_reported():
    allocations, rows, hostdevs = clean()
    hostdevs[VM2] = hostdevs[VM2] + [VFS[3]]
    hostdevs[VM3] = [VFS[3]]
    assert kinds(audit.audit(allocations, rows, hostdevs, UNITS)) == [
        (audit.DOUBLE_ASSIGNMENT, RP, VM2, (VFS[3],)),
        (audit.DOUBLE_ASSIGNMENT, RP, VM3, (VFS[3],))]


def test_guest_with_a_unit_the_store_gives_another_instance():
    allocations, rows, hostdevs = clean()
    # VM2's guest was given VM1's VF; VM1's guest does not have it.
    hostdevs[VM1] = [VFS[0]]
    hostdevs[VM2] = hostdevs[VM2] + [VFS[1]]
    findings = audit.audit(allocations, rows, hostdevs, UNITS)
    assert kinds(findings) == [
        (audit.DOUBLE_ASSIGNMENT, RP, VM2, (VFS[1],))]
    assert findings[0].message.endswith('the store gives it to vm-1')


def test_migration_holding_the_units_of_a_stopped_guest_is_not_reported():
    # A resize started: the allocation (and the units) moved to the
    # migration record; the stopped guest still has them as hostdevs.
    allocations = {RP: {MIGRATION: 2}}
    rows = [row(VFS[0], MIGRATION), row(VFS[1], MIGRATION)]
    hostdevs = {VM1: VFS[:2]}
    assert audit.audit(allocations, rows, hostdevs, UNITS) == []


def test_migration_is_still_checked_against_placement():
    # Confirmed: Placement dropped the migration's allocation, its rows
    # stayed behind.
    rows = [row(VFS[0], MIGRATION)]
    assert kinds(audit.audit({RP: {}}, rows, {}, UNITS)) == [
        (audit.ORPHAN_UNIT, RP, MIGRATION, (VFS[0],))]


def test_migration_unit_in_two_guests_is_a_double_assignment():
    rows = [row(VFS[0], MIGRATION)]
    hostdevs = {VM1: [VFS[0]], VM2: [VFS[0]]}
    assert [f.consumer for f in audit.audit(
        {RP: {MIGRATION: 1}}, rows, hostdevs, UNITS)] == [VM1, VM2]


def test_findings_are_sorted_by_provider_then_consumer():
    allocations, rows, hostdevs = clean()
    rows.append(row(VFS[3], VM3))
    allocations[OTHER_RP][VM1] = 1
    hostdevs[VM3] = [VFS[3], VFS[2]]
    assert [(f.provider, f.consumer, f.kind) for f in audit.audit(
        allocations, rows, hostdevs, UNITS)] == [
        (OTHER_RP, VM1, audit.MISSING_UNITS),
        (RP, VM3, audit.ORPHAN_UNIT),
        (RP, VM3, audit.UNALLOCATED_DEVICE)]


def test_fix_releases_only_orphans_no_guest_has():
    allocations, rows, hostdevs = clean()
    rows += [row(VFS[3], VM3), row(OTHER_VFS[1], VM1, OTHER_RP)]
    allocations[RP][VM2] = 1
    hostdevs[VM1] = hostdevs[VM1] + [OTHER_VFS[1]]
    findings = audit.audit(allocations, rows, hostdevs, UNITS)
    assert [f.kind for f in findings] == [
        audit.ORPHAN_UNIT, audit.MISSING_UNITS, audit.ORPHAN_UNIT]
    releases, left = audit.plan_fix(findings, hostdevs)
    assert releases == [audit.Release(VM3, RP, (VFS[3],))]
    assert left == {
        findings[0]: 'domain vm-1 still has 0000:6b:00.2 as a hostdev; '
                     'detach it from the guest (or delete the instance) '
                     'first',
        findings[1]: 'nova-compute assigns missing units when it next '
                     'builds the guest (hard reboot the instance)'}


@pytest.mark.parametrize('kind', [audit.DOUBLE_ASSIGNMENT,
                                  audit.EXTRA_UNITS,
                                  audit.UNALLOCATED_DEVICE])
def test_fix_leaves_other_kinds_alone_saying_why(kind):
    finding = audit.Finding(kind, RP, VM1, (VFS[0],), 'planted')
    releases, left = audit.plan_fix([finding], {})
    assert releases == [] and left[finding]


@pytest.mark.parametrize('xml, expected', [
    ("<domain><devices><hostdev mode='subsystem' type='pci' "
     "managed='yes'><source><address domain='0x0000' bus='0x70' "
     "slot='0x00' function='0x1'/></source></hostdev></devices></domain>",
     ['0000:70:00.1']),
    # A VMD domain, upper-case hex, a USB hostdev and a duplicate.
    ("<domain><devices>"
     "<hostdev type='pci'><source><address domain='0x10000' bus='0x3B' "
     "slot='0x1f' function='0x7'/></source></hostdev>"
     "<hostdev type='usb'><source><vendor id='0x1'/></source></hostdev>"
     "<hostdev type='pci'><source><address domain='0x10000' bus='0x3b' "
     "slot='0x1f' function='0x7'/></source></hostdev>"
     "<hostdev type='pci'><source><address bus='0x3b'/></source>"
     "</hostdev></devices></domain>",
     ['10000:3b:1f.7']),
    ('<domain><devices/></domain>', []),
    # An mdev vGPU: its uuid is the unit.
    ("<domain><devices><hostdev mode='subsystem' type='mdev' "
     "model='vfio-pci'><source><address "
     "uuid='4FA21547-f028-504a-8d22-0e4311df4930'/></source></hostdev>"
     "<hostdev type='pci' managed='no'><source><address domain='0x0000' "
     "bus='0x41' slot='0x00' function='0x5'/></source></hostdev>"
     "</devices></domain>",
     ['0000:41:00.5', '4fa21547-f028-504a-8d22-0e4311df4930']),
])
def test_hostdev_addresses(xml, expected):
    assert audit.hostdev_addresses(xml) == expected


def hold(unit, state, consumer=VM3, reason=None):
    return unit_store.Hold(RP, unit, state, reason, consumer, None,
                           1700000000.0, 1700000000.0)


def test_held_units_are_listed_with_why():
    holds = [hold(VFS[2], unit_store.SCRUBBING),
             hold(VFS[3], unit_store.USED),
             hold(VFS[0], unit_store.FAILED,
                  reason='scrub of unit 0000:70:00.1 failed: step flr')]
    findings = audit.held_findings(holds, {}, {RP: '0000:70:00.0'})
    assert kinds(findings) == [(audit.HELD_UNIT, RP, VM3, (u,))
                               for u in (VFS[2], VFS[3], VFS[0])]
    since = time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(1700000000))
    assert [f.message for f in findings] == [
        'unit 0000:70:00.3 of accelerator 0000:70:00.0 is held back since '
        '%s: being scrubbed' % since,
        'unit 0000:70:00.4 of accelerator 0000:70:00.0 is held back since '
        '%s: one-time-use, it waits for "cyborg-nova device-set-state '
        '0000:70:00.4 ready"' % since,
        'unit 0000:70:00.1 of accelerator 0000:70:00.0 is held back since '
        '%s: its scrub failed: scrub of unit 0000:70:00.1 failed: step flr'
        % since]
    # Not disagreements: the exit status does not change for them.
    assert audit.HELD_UNIT not in audit.INCONSISTENCIES


def test_a_held_unit_a_guest_still_has_is_an_inconsistency():
    allocations, rows, hostdevs = clean()
    # VM3's definition still has the unit its instance gave up.
    hostdevs[VM3] = [VFS[3]]
    holds = [hold(VFS[3], unit_store.SCRUBBING)]
    findings = audit.audit(allocations, rows, hostdevs, UNITS,
                           held=[VFS[3]])
    # Not an unallocated device: the held unit's own finding says it.
    assert findings == []
    findings = audit.held_findings(holds, hostdevs)
    assert kinds(findings) == [(audit.HELD_IN_GUEST, RP, VM3, (VFS[3],)),
                               (audit.HELD_UNIT, RP, VM3, (VFS[3],))]
    assert findings[0].message.endswith(
        'is a hostdev of domain vm-3: its scrub would reset it under the '
        'guest')
    assert audit.HELD_IN_GUEST in audit.INCONSISTENCIES
    releases, left = audit.plan_fix(findings, hostdevs)
    assert releases == [] and set(left) == set(findings)
