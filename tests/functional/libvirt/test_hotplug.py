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

"""Attach and detach against a real libvirtd and a real Placement.

The production strategy (PCI hostdevs) is refused by libvirt on a host
without an IOMMU (see test_attach_cli.py); here devices QEMU does
hot-plug stand in for it, so the whole flow runs for real: the
allocation read-modify-write, the units, libvirt's attach, the
DEVICE_REMOVED event, the timeout.
"""

import os
import shutil
import tempfile
import threading
import time
import uuid

import pytest

from cyborg_nova import assignments
from cyborg_nova.hotplug import allocations as hotplug_allocations
from cyborg_nova.hotplug import errors as hotplug_errors
from cyborg_nova.hotplug import flow as hotplug_flow
from cyborg_nova.hotplug import guest as hotplug_guest
from tests.functional.libvirt import conftest
from tests.functional.libvirt import libvirtd_fixture
from tests.functional.libvirt import strategies

PF = '0000:6b:00.0'
RC = 'CUSTOM_QAT'


def _guest(server, strategy):
    return hotplug_guest.open_guest(libvirtd_fixture.URI, server, strategy)


def _units(host, server):
    return assignments.Assignments(host.store).of_consumer(server)


def test_attach_then_detach_with_device_removed_event(host, domains):
    domain = domains()
    booted = host.boot(domain.server)
    accelerator = host.accelerators[PF]
    rp = host.provider(PF)
    guest = _guest(domain.server, strategies.UsbTablet())
    try:
        result = hotplug_flow.attach(host.client, host.store, host.nodename,
                                     guest, accelerator, count=2)
        assert result.provider == rp and result.resource_class == RC
        assert len(set(result.units)) == 2
        assert set(result.units) <= set(accelerator.units)

        # Placement: the instance's allocations plus the accelerator's.
        attached = host.allocations(domain.server)
        assert attached['allocations'][rp]['resources'] == {RC: 2}
        expected = conftest.without_generations(booted)
        got = conftest.without_generations(attached)
        del got['allocations'][rp]
        assert got == expected
        assert host.usage(PF) == {RC: 2}
        # The units, recorded; the devices, in the guest and definition.
        assert _units(host, domain.server) == {rp: sorted(result.units)}
        for unit in result.units:
            assert strategies.alias(unit) in domain.xml()
            assert strategies.alias(unit) in domain.xml(inactive=True)
        # Attached once: a second attach changes nothing.
        with pytest.raises(hotplug_errors.AttachError) as caught:
            hotplug_flow.attach(host.client, host.store, host.nodename, guest,
                                accelerator)
        assert str(caught.value) == (
            'instance %s already holds %s of accelerator %s; nothing was '
            'changed' % (domain.server, ', '.join(sorted(result.units)), PF))
        assert host.allocations(domain.server) == attached

        result = hotplug_flow.detach(host.client, host.store, host.nodename,
                                     guest, accelerator, timeout=20)
    finally:
        guest.close()
    # libvirt's DEVICE_REMOVED events arrived before anything was freed.
    assert sorted(result.events) == sorted(
        strategies.alias(u) for u in result.units)
    assert result.confirmed_by in ('immediate', 'event')
    for unit in result.units:
        assert strategies.alias(unit) not in domain.xml()
        assert strategies.alias(unit) not in domain.xml(inactive=True)
    after = host.allocations(domain.server)
    assert conftest.without_generations(after) == (
        conftest.without_generations(booted))
    assert after['consumer_generation'] == booted['consumer_generation'] + 2
    assert _units(host, domain.server) == {}
    assert host.usage(PF) == {RC: 0}


def test_detach_of_what_is_not_attached_changes_nothing(host, domains):
    domain = domains()
    booted = host.boot(domain.server)
    xml = domain.xml()
    guest = _guest(domain.server, strategies.UsbTablet())
    try:
        with pytest.raises(hotplug_errors.AttachError) as caught:
            hotplug_flow.detach(host.client, host.store, host.nodename, guest,
                                host.accelerators[PF], timeout=5)
    finally:
        guest.close()
    assert str(caught.value) == (
        'accelerator %s is not attached to instance %s; nothing was '
        'changed' % (PF, domain.server))
    assert host.allocations(domain.server) == booted
    assert _units(host, domain.server) == {}
    assert domain.xml() == xml


@pytest.fixture
def image_dir():
    """A directory QEMU (another user) can reach disk images in."""
    path = tempfile.mkdtemp(prefix='cyborg-hotplug-')
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_detach_times_out_when_the_guest_keeps_the_device(
        host, domains, image_dir):
    domain = domains()
    host.boot(domain.server)
    accelerator = host.accelerators[PF]
    rp = host.provider(PF)
    guest = _guest(domain.server,
                   strategies.VirtioDisk(image_dir, accelerator.units))
    try:
        result = hotplug_flow.attach(host.client, host.store, host.nodename,
                                     guest, accelerator)
        attached = host.allocations(domain.server)
        (unit,) = result.units
        started = time.monotonic()
        with pytest.raises(hotplug_errors.AttachError) as caught:
            hotplug_flow.detach(host.client, host.store, host.nodename, guest,
                                accelerator, timeout=2)
        waited = time.monotonic() - started
    finally:
        guest.close()
    assert waited >= 2
    assert str(caught.value) == (
        'the guest of instance %s did not release %s within 2s; its '
        'allocation and units are unchanged' % (domain.server, unit))
    # Nothing freed: the guest still has the device.
    assert host.allocations(domain.server) == attached
    assert _units(host, domain.server) == {rp: [unit]}
    assert strategies.alias(unit) in domain.xml()
    assert host.usage(PF) == {RC: 1}
    # Clean up as Nova would when the instance goes away.
    domain.dom.destroy()
    assignments.Assignments(host.store).release(domain.server)
    host.placement('DELETE', '/allocations/%s' % domain.server)


def test_refused_second_unit_unplugs_the_first_and_restores(
        host, domains):
    domain = domains()
    booted = host.boot(domain.server)
    accelerator = host.accelerators[PF]
    first, second = accelerator.units[:2]
    xml = domain.xml()
    guest = _guest(domain.server, strategies.TabletThenHostdev(first))
    try:
        with pytest.raises(hotplug_errors.AttachError) as caught:
            hotplug_flow.attach(host.client, host.store, host.nodename, guest,
                                accelerator, count=2)
    finally:
        guest.close()
    assert str(caught.value) == (
        "libvirt refused to attach %s to instance %s: unsupported "
        "configuration: host doesn't support passthrough of host PCI "
        "devices; nothing was changed" % (second, domain.server))
    after = host.allocations(domain.server)
    assert conftest.without_generations(after) == (
        conftest.without_generations(booted))
    assert _units(host, domain.server) == {}
    assert strategies.alias(first) not in domain.xml()
    assert domain.xml() == xml
    assert host.usage(PF) == {RC: 0}


def test_consumer_generation_conflicts_are_retried(host):
    server = str(uuid.uuid4())
    booted = host.boot(server)
    rp = host.provider(PF)
    calls = []

    def mutate(allocs):
        calls.append(dict(allocs))
        if len(calls) == 1:
            # Nova resizes the instance between our read and our write.
            status, body = host.placement('PUT', '/allocations/' + server, {
                'allocations': {host.root: {'resources': {
                    'VCPU': 2, 'MEMORY_MB': 64, 'DISK_GB': 1}}},
                'project_id': booted['project_id'],
                'user_id': booted['user_id'],
                'consumer_generation': booted['consumer_generation'],
                'consumer_type': 'INSTANCE'})
            assert status == 204, body
        allocs[rp] = {'resources': {RC: 1}}
        return allocs

    hotplug_allocations.change_allocations(host.client, server, mutate)
    assert len(calls) == 2
    after = host.allocations(server)
    assert after['allocations'][host.root]['resources']['VCPU'] == 2
    assert after['allocations'][rp]['resources'] == {RC: 1}
    assert after['consumer_generation'] == booted['consumer_generation'] + 2
    assert after['consumer_type'] == 'INSTANCE'

    # A consumer that changes at every attempt: bounded, nothing written.
    def always_beaten(allocs):
        current = host.allocations(server)
        host.placement('PUT', '/allocations/' + server, {
            'allocations': {r: {'resources': a['resources']}
                            for r, a in current['allocations'].items()},
            'project_id': current['project_id'],
            'user_id': current['user_id'],
            'consumer_generation': current['consumer_generation'],
            'consumer_type': 'INSTANCE'})
        allocs.pop(rp)
        return allocs
    with pytest.raises(hotplug_errors.AttachError) as caught:
        hotplug_allocations.change_allocations(host.client, server,
                                               always_beaten, retries=3)
    assert 'kept changing (3 consumer generation conflicts)' in str(
        caught.value)
    assert host.allocations(server)['allocations'][rp]['resources'] == {
        RC: 1}
    host.placement('DELETE', '/allocations/' + server)


def test_device_removed_event_wakes_the_wait(host, domains, monkeypatch):
    """A removal that completes later is noticed by its event, not a poll.

    The device is unplugged from another connection while the wait runs
    (as when a guest acknowledges a PCI unplug late).
    """
    import libvirt
    # The module wait_gone reads it from.
    monkeypatch.setattr(hotplug_guest, 'POLL_INTERVAL', 60.0)
    domain = domains()
    unit = host.accelerators[PF].units[0]
    strategy = strategies.UsbTablet()
    guest = _guest(domain.server, strategy)
    woken = threading.Event()
    events = []

    def removed(conn, dom, alias, opaque):
        events.append(alias)
        woken.set()
    try:
        guest.attach(unit)
        callback = guest.conn.domainEventRegisterAny(
            guest.dom, libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED, removed,
            None)
        unplug = threading.Timer(0.5, domain.dom.detachDeviceFlags, args=(
            strategy.device_xml(unit),
            libvirt.VIR_DOMAIN_AFFECT_LIVE | libvirt.VIR_DOMAIN_AFFECT_CONFIG))
        started = time.monotonic()
        unplug.start()
        how = hotplug_guest.wait_gone(guest.present, [unit], 10, started,
                                      domain.server, woken)
        waited = time.monotonic() - started
        unplug.join()
        guest.conn.domainEventDeregisterAny(callback)
    finally:
        guest.close()
    assert how == 'event'
    assert 0.5 <= waited < 5
    assert events == [strategies.alias(unit)]
    assert strategies.alias(unit) not in domain.xml()
