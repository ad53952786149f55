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

"""``cyborg-nova instance-attach`` / ``instance-detach``, for real.

The production path: PCI hostdevs built with Nova's config classes,
against a real libvirtd and a real Placement. This host has no IOMMU, so
libvirt refuses to hot-plug a PCI function into a running guest; into
the definition of a stopped instance it takes it (checking for VFIO only
when the guest starts).
"""

from concurrent import futures
import uuid

import pytest

from cyborg_nova import assignments
from cyborg_nova import store as state_store
from tests.functional.libvirt import conftest

PF = '0000:70:00.0'
RC = 'CUSTOM_QAT'
REFUSAL = ("unsupported configuration: host doesn't support passthrough "
           "of host PCI devices")


def _one_line_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert 'Traceback' not in err
    return lines[0]


def _units(host, server):
    return assignments.Assignments(host.store).of_consumer(server)


@pytest.mark.parametrize('by', ['address', 'provider'])
def test_attach_refused_by_libvirt_changes_nothing(host, domains, by):
    domain = domains()
    booted = host.boot(domain.server)
    xml, definition = domain.xml(), domain.xml(inactive=True)
    device = PF if by == 'address' else host.provider(PF)
    rc, out, err = host.cli('instance-attach', domain.server, '--device',
                            device, '--count', '2')
    assert rc == 1, (out, err)
    line = _one_line_error(err)
    unit = host.accelerators[PF].units[0]
    assert line == ('libvirt refused to attach %s to instance %s: %s; '
                    'nothing was changed' % (unit, domain.server, REFUSAL))
    after = host.allocations(domain.server)
    # Written, then put back: the same allocations, two generations on.
    assert conftest.without_generations(after) == (
        conftest.without_generations(booted))
    assert after['consumer_generation'] == booted['consumer_generation'] + 2
    assert _units(host, domain.server) == {}
    assert assignments.Assignments(host.store).of_provider(
        host.provider(PF)) == []
    assert host.usage(PF) == {RC: 0}
    assert domain.xml() == xml
    assert domain.xml(inactive=True) == definition


def test_attach_to_stopped_instance_then_detach(host, domains):
    domain = domains(running=False)
    booted = host.boot(domain.server)
    rp = host.provider(PF)
    rc, out, err = host.cli('instance-attach', domain.server, '--device',
                            PF)
    assert rc == 0, err
    unit = host.accelerators[PF].units[0]
    assert out == ('attached %s (1 %s of provider %s) to instance %s: %s\n'
                   % (PF, RC, rp, domain.server, unit))
    assert host.allocations(domain.server)['allocations'][rp][
        'resources'] == {RC: 1}
    assert _units(host, domain.server) == {rp: [unit]}
    bus = unit.split(':')[1]
    assert ("<address domain='0x0000' bus='0x%s' slot='0x00' "
            "function='0x1'/>" % bus) in domain.xml(inactive=True)

    rc, out, err = host.cli('instance-detach', domain.server, '--device',
                            rp, '--timeout', '5')
    assert rc == 0, err
    assert out == 'detached %s (provider %s) from instance %s: %s\n' % (
        PF, rp, domain.server, unit)
    assert '<hostdev' not in domain.xml(inactive=True)
    after = host.allocations(domain.server)
    assert conftest.without_generations(after) == (
        conftest.without_generations(booted))
    assert _units(host, domain.server) == {}
    # Held for nova-compute's scrub, and reserved before the allocation
    # went, so nothing was scheduled onto it meanwhile.
    assert [(h.unit, h.state, h.consumer) for h in host.store.units.holds(
        provider=rp)] == [(unit, 'scrubbing', domain.server)]
    status, body = host.placement('GET', '/resource_providers/%s/'
                                  'inventories' % rp)
    assert body['inventories'][RC]['reserved'] == 1


def test_bad_input_is_refused_before_anything_changes(host, domains):
    domain = domains()
    booted = host.boot(domain.server)
    xml = domain.xml()
    other = str(uuid.uuid4())
    cases = [
        (['instance-attach', domain.server, '--device', 'nonsense'],
         "'nonsense' is neither a PCI address (e.g. 0000:3b:00.0) nor a "
         "resource provider uuid"),
        (['instance-attach', domain.server, '--device', other],
         'no accelerator of %s has provider %s'
         % (host.nodename, other)),
        (['instance-attach', domain.server, '--device', '0000:00:04.0'],
         '0000:00:04.0 is not an accelerator cyborg-nova manages on this '
         'host'),
        (['instance-attach', domain.server, '--device', '0000:70:00.1'],
         '0000:70:00.1 is a unit of accelerator 0000:70:00.0'),
        (['instance-attach', other, '--device', PF],
         'no instance %s on this host' % other),
        (['instance-attach', 'not-a-uuid', '--device', PF],
         "'not-a-uuid' is not an instance uuid"),
        (['instance-attach', domain.server, '--device', PF, '--count',
          '17'],
         'accelerator 0000:70:00.0 has 16 unit(s); cannot attach 17'),
        (['instance-detach', domain.server, '--device', PF],
         'accelerator %s is not attached to instance %s; nothing was '
         'changed' % (PF, domain.server)),
        (['instance-detach', other, '--device', PF],
         'no instance %s on this host' % other),
    ]
    # Each case is a command of its own (~4 s, mostly importing Nova):
    # run them side by side, as none of them may change anything.
    with futures.ThreadPoolExecutor(4) as pool:
        runs = list(pool.map(lambda case: host.cli(*case[0]), cases))
    for (args, message), (rc, out, err) in zip(cases, runs):
        assert rc == 1, (args, out, err)
        assert message in _one_line_error(err), (args, err)
    rc, out, err = host.cli('instance-attach', domain.server, '--device',
                            PF, '--count', '0')
    assert rc == 2 and 'must be 1 or more' in err

    # Not a single write anywhere: same generation, XML, store.
    assert host.allocations(domain.server) == booted
    assert domain.xml() == xml
    assert _units(host, domain.server) == {}
    assert host.usage(PF) == {RC: 0}


def test_device_not_ready_is_refused(host, domains):
    domain = domains()
    booted = host.boot(domain.server)
    host.store.set_state(host.nodename, PF, state_store.HELD, 'maintenance')
    try:
        rc, out, err = host.cli('instance-attach', domain.server,
                                '--device', PF)
    finally:
        host.store.set_state(host.nodename, PF, state_store.READY)
    assert rc == 1
    assert _one_line_error(err) == (
        'accelerator %s is held (maintenance); only a ready device is '
        'attached' % PF)
    assert host.allocations(domain.server) == booted


def test_instance_without_allocations_is_refused(host, domains):
    domain = domains()
    rc, out, err = host.cli('instance-attach', domain.server, '--device',
                            PF)
    assert rc == 1
    assert _one_line_error(err) == (
        'instance %s has no allocations in Placement; is it an instance '
        'of this cloud?' % domain.server)
    assert host.allocations(domain.server) == {'allocations': {}}
    assert _units(host, domain.server) == {}
