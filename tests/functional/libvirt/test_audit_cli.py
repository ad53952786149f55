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

"""``cyborg-nova audit``, for real: libvirtd, Placement, the state store.

Each test builds instances as nova-compute would (allocations written,
units assigned, the guest defined with its PCI hostdevs, built with
Nova's config classes), plants one inconsistency and runs the command
in a subprocess. Guests are defined, not started: this host has no
IOMMU, and libvirt checks for VFIO only when a guest starts.
"""

from __future__ import annotations

from concurrent import futures
import dataclasses
import json
import os
import re
import subprocess
import sys
import uuid

import pytest

from cyborg_nova import assignments
from cyborg_nova.hotplug import guest as hotplug_guest
from tests.functional.libvirt import conftest

PF = '0000:70:00.0'
RC = 'CUSTOM_QAT'


@dataclasses.dataclass
class Instance:
    server: str
    units: list[str]
    domain: object = None


@pytest.fixture
def cloud(host, domains):
    """Builds instances; frees their units and allocations after."""
    made = []

    class Cloud:
        store = assignments.Assignments(host.store)
        rp = host.provider(PF)

        def free_units(self, count: int) -> list[str]:
            taken = {a.unit for a in self.store.of_provider(self.rp)}
            return [u for u in host.accelerators[PF].units
                    if u not in taken][:count]

        def consumer(self) -> str:
            server = str(uuid.uuid4())
            made.append(server)
            return server

        def allocate(self, server: str, count: int) -> None:
            """Put ``count`` of the PF in ``server``'s allocations."""
            body = host.allocations(server)
            allocs = {rp: {'resources': alloc['resources']}
                      for rp, alloc in body['allocations'].items()}
            allocs[self.rp] = {'resources': {RC: count}}
            if not count:
                del allocs[self.rp]
            status, resp = host.placement(
                'PUT', '/allocations/%s' % server, {
                    'allocations': allocs,
                    'consumer_generation': body['consumer_generation'],
                    'project_id': body['project_id'],
                    'user_id': body['user_id'],
                    'consumer_type': 'INSTANCE'})
            assert status == 204, resp

        def guest(self, units: list[str] = ()):
            """A stopped guest whose definition has ``units``.

            Its uuid is the instance's: allocate and assign with it.
            """
            domain = domains(running=False)
            made.append(domain.server)
            self.plug(domain, units)
            return domain

        @staticmethod
        def plug(domain, units: list[str]) -> None:
            import libvirt
            for unit in units:
                domain.dom.attachDeviceFlags(
                    hotplug_guest.PciHostdev().device_xml(unit),
                    libvirt.VIR_DOMAIN_AFFECT_CONFIG)

        def instance(self, count: int = 2) -> Instance:
            """A consistent one: allocated, assigned, in its guest."""
            domain = self.guest()
            host.boot(domain.server)
            self.allocate(domain.server, count)
            units = self.store.assign(domain.server, self.rp,
                                      host.accelerators[PF].units, count)
            self.plug(domain, units)
            return Instance(domain.server, units, domain)

    yield Cloud()
    for consumer in made:
        assignments.Assignments(host.store).release(consumer)
        host.placement('DELETE', '/allocations/%s' % consumer)


def run(host, *args, nodename='', env=None):
    """(status, stdout, stderr) of ``cyborg-nova audit ARGS``.

    ``--nodename`` is the host's unless ``nodename`` is given (None:
    no ``--nodename``).
    """
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith('OS_')}
    environ.update(host.env if env is None else env)
    proc = subprocess.run(
        [sys.executable, '-W', 'ignore', '-m', 'cyborg_nova.cmd.audit',
         '--config-file', host.conf_path, 'audit']
        + ([] if nodename is None
           else ['--nodename', nodename or host.nodename])
        + list(args),
        capture_output=True, text=True, env=environ, cwd=conftest.REPO,
        timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def findings(host, *args):
    """(status, rows as JSON, the final line) of an audit."""
    rc, out, err = run(host, '-f', 'json', *args)
    assert 'Traceback' not in err, err
    return rc, json.loads(out), err.strip().splitlines()[-1]


def test_clean_host(host, cloud, domains):
    first, second = cloud.instance(2), cloud.instance(1)
    # A running guest without accelerators is listed too.
    domains(running=True)
    rc, out, err = run(host)
    assert rc == 0, (out, err)
    assert err == ''
    # No rows, no table: the final line alone. Every domain of the
    # libvirtd is checked, other tests' included, so at least ours.
    match = re.fullmatch(
        r'no inconsistencies: 3 accelerator provider\(s\), 3 unit '
        r'row\(s\), (\d+) domain\(s\) checked', out.strip())
    assert match, out
    assert int(match.group(1)) >= 3
    assert len(first.units) + len(second.units) == 3


def test_resize_in_progress_is_not_reported(host, cloud):
    resized = cloud.instance()
    # Nova's conductor moved the instance's allocation to the migration
    # record, and the units followed; the stopped guest keeps them.
    migration = cloud.consumer()
    host.boot(migration)
    cloud.allocate(migration, 2)
    cloud.allocate(resized.server, 0)
    assert cloud.store.move(resized.server, migration) == 2
    rc, out, err = run(host)
    assert rc == 0, (out, err)
    assert out.strip().startswith('no inconsistencies')


def test_orphan_unit(host, cloud):
    cloud.instance()
    ghost = cloud.consumer()
    (unit,) = cloud.store.assign(ghost, cloud.rp, cloud.free_units(1), 1)
    rc, out, err = run(host)
    assert rc == 1, (out, err)
    assert 'orphan-unit' in out and ghost in out and unit in out
    assert out.splitlines()[-1].startswith('1 inconsistency found: ')
    rc, rows, last = findings(host)
    assert rc == 1
    assert rows == [{
        'kind': 'orphan-unit', 'device': PF, 'provider': cloud.rp,
        'consumer': ghost, 'units': [unit],
        'message': 'the store gives %s to %s, which holds nothing of '
                   'accelerator %s in Placement' % (unit, ghost, PF)}]
    assert last.startswith('1 inconsistency found')


def test_allocation_without_units(host, cloud):
    server = cloud.guest().server
    host.boot(server)
    cloud.allocate(server, 2)
    rc, rows, _ = findings(host)
    assert rc == 1
    assert [(r['kind'], r['consumer'], r['units']) for r in rows] == [
        ('missing-units', server, [])]
    assert rows[0]['message'] == (
        '%s holds 2 of accelerator %s in Placement but the store records '
        '0 unit(s) for it' % (server, PF))


def test_guest_with_a_unit_nobody_allocated(host, cloud):
    cloud.instance()
    (unit,) = cloud.free_units(1)
    stray = cloud.guest([unit])
    rc, out, err = run(host)
    assert rc == 1, (out, err)
    assert 'unallocated-device' in out and stray.server in out
    rc, rows, _ = findings(host)
    assert [(r['kind'], r['consumer'], r['units']) for r in rows] == [
        ('unallocated-device', stray.server, [unit])]


def test_two_guests_with_the_same_unit(host, cloud):
    owner = cloud.instance()
    thief = cloud.guest(owner.units[:1])
    rc, out, err = run(host)
    assert rc == 1, (out, err)
    assert 'double-assignment' in out and thief.server in out
    rc, rows, _ = findings(host)
    assert [(r['kind'], r['consumer'], r['units']) for r in rows] == [
        ('double-assignment', thief.server, owner.units[:1])]
    assert rows[0]['message'] == (
        'unit %s of accelerator %s is a hostdev of domain %s and of %s; '
        'the store gives it to %s' % (owner.units[0], PF, thief.server,
                                      owner.server, owner.server))


def test_fix_releases_the_orphan_and_leaves_the_rest(host, cloud):
    owner = cloud.instance()
    ghost = cloud.consumer()
    orphan = cloud.store.assign(ghost, cloud.rp, cloud.free_units(1), 1)
    # An orphan a guest still has: releasing it is not safe.
    guest = cloud.guest()
    held = guest.server
    kept = cloud.store.assign(held, cloud.rp, cloud.free_units(1), 1)
    cloud.plug(guest, kept)
    thief = cloud.guest(owner.units[:1])

    rc, rows, last = findings(host, '--fix')
    assert rc == 1
    outcome = {(r['kind'], r['consumer']): r['fix'] for r in rows}
    assert outcome == {
        ('orphan-unit', ghost): 'fixed: released %s' % orphan[0],
        ('orphan-unit', held):
            'not fixed: domain %s still has %s as a hostdev; detach it '
            'from the guest (or delete the instance) first'
            % (held, kept[0]),
        ('double-assignment', thief.server):
            'not fixed: which guest should keep the function is for an '
            'operator to decide; detach it from the other '
            '(instance-detach, or edit its definition)'}
    assert last.startswith('3 inconsistencies found, 1 fixed, 2 remain: ')
    assert cloud.store.of_consumer(ghost) == {}
    assert cloud.store.of_consumer(held) == {cloud.rp: kept}
    assert cloud.store.of_consumer(owner.server) == {
        cloud.rp: owner.units}

    # The table says the same; the released orphan is gone.
    rc, out, err = run(host, '--fix')
    assert rc == 1, (out, err)
    assert ghost not in out
    assert out.count('not fixed: ') == 2
    assert out.splitlines()[-1].startswith(
        '2 inconsistencies found, 0 fixed, 2 remain: ')


def test_fix_of_everything_exits_0(host, cloud):
    ghost = cloud.consumer()
    cloud.store.assign(ghost, cloud.rp, cloud.free_units(2), 2)
    rc, rows, last = findings(host, '--fix')
    assert rc == 0
    assert [(r['kind'], r['consumer']) for r in rows] == [
        ('orphan-unit', ghost)]
    assert last.startswith('1 inconsistency found, 1 fixed, 0 remain: ')
    rc, out, err = run(host)
    assert rc == 0 and out.strip().startswith('no inconsistencies'), (
        out, err)


def test_bad_input_is_one_line(host):
    closed = dict(host.env, OS_ENDPOINT='http://127.0.0.1:9/placement')
    cases = [
        (dict(nodename='no-such-node'),
         "no compute node 'no-such-node' in Placement; --nodename is "
         "nova-compute's hypervisor hostname"),
        (dict(env=closed), 'cannot reach Placement: '),
        (dict(args=['--libvirt-uri',
                    'qemu:///system?socket=/nonexistent/sock']),
         'cannot connect to libvirt at qemu:///system?socket=/nonexistent'
         '/sock: '),
    ]
    with futures.ThreadPoolExecutor(len(cases)) as pool:
        runs = list(pool.map(
            lambda case: run(host, *case[0].get('args', ()),
                             nodename=case[0].get('nodename', ''),
                             env=case[0].get('env')), cases))
    for (kwargs, message), (rc, out, err) in zip(cases, runs):
        assert rc == 1, (kwargs, out, err)
        assert 'Traceback' not in err
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1, (kwargs, err)
        assert lines[0].startswith(message), (kwargs, err)


def test_held_units_are_listed_and_one_still_in_a_guest_is_reported(
        host, cloud):
    import libvirt
    gone = cloud.instance(2)
    # Deleted as nova-compute deletes with scrubbing on: the allocation
    # goes, the units are held for their scrub. Its domain was left
    # defined with the first unit.
    cloud.allocate(gone.server, 0)
    assignments.Assignments(host.store, hold_freed=True).release(
        gone.server, cloud.rp)
    gone.domain.dom.detachDeviceFlags(
        hotplug_guest.PciHostdev().device_xml(gone.units[1]),
        libvirt.VIR_DOMAIN_AFFECT_CONFIG)
    try:
        rc, rows, last = findings(host)
        assert rc == 1
        assert [(r['kind'], r['consumer'], r['units']) for r in rows] == [
            ('held-unit-in-guest', gone.server, gone.units[:1]),
            ('held-unit', gone.server, gone.units[:1]),
            ('held-unit', gone.server, gone.units[1:])]
        assert rows[1]['message'].endswith(': being scrubbed')
        assert last.startswith('1 inconsistency found: ')
        assert last.endswith('; 2 unit(s) held back from the next guest')
        # --fix leaves them alone, saying why.
        rc, rows, _ = findings(host, '--fix')
        assert rc == 1
        assert rows[0]['fix'].startswith(
            'not fixed: the guest may be using the function')
    finally:
        with host.store.units.change() as table:
            for unit in gone.units:
                table.lift(cloud.rp, unit, ['scrubbing'])


def test_help_explains_each_kind(host):
    rc, out, err = run(host, '--help', nodename=None)
    assert rc == 0, err
    for kind in ('double-assignment', 'orphan-unit', 'missing-units',
                 'extra-units', 'unallocated-device', 'held-unit-in-guest',
                 'held-unit', '--fix'):
        assert kind in out
