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

"""The provider -> device lookup, and the unit books' hostdev kinds."""

import pytest

from cyborg_drivers import device as device_model
from cyborg_nova import assignments
from cyborg_nova import guests
from cyborg_nova import provider_devices
from cyborg_nova import providers
from cyborg_nova import remote_devices
from cyborg_nova import store as state_store
from cyborg_nova import unit_work
from tests.unit.test_remote_devices import accelerator

NODE = 'cn1'


@pytest.fixture
def store(tmp_path):
    return state_store.StateStore(str(tmp_path / 'state.sqlite'))


def test_recorded_gives_back_what_the_cycle_reported(store):
    qat = accelerator()
    vgpu = accelerator('0000:3b:00.0', capabilities=(
        ('vgpu_type', '557'), ('vgpu_framework', 'vfio')))
    store.sync(NODE, [qat, vgpu], state_store.READY)
    assert provider_devices.record(store, NODE, [qat, vgpu]) == 2
    # An unchanged cycle writes nothing.
    assert provider_devices.record(store, NODE, [qat, vgpu]) == 0
    host = provider_devices.recorded(store, [NODE])
    assert host.unrecorded == {}
    rp = providers.provider_uuid(NODE, qat.address)
    assert host.devices[rp] == provider_devices.ProviderDevice(rp, NODE, qat)
    assert host.devices[providers.provider_uuid(
        NODE, vgpu.address)].accelerator == vgpu


def test_a_guest_build_decodes_only_the_devices_it_was_allocated(store):
    qat, other = accelerator(), accelerator('0000:71:00.0')
    store.sync(NODE, [qat, other], state_store.READY)
    provider_devices.record(store, NODE, [qat, other])
    ours = {providers.provider_uuid(NODE, a.address): (NODE, a.address)
            for a in (qat, other)}
    rp = providers.provider_uuid(NODE, qat.address)

    def discover():
        raise AssertionError('a recorded device needs no discovery')
    got = provider_devices.of_providers(store, ours, [rp], discover)
    assert got == {rp: provider_devices.ProviderDevice(rp, NODE, qat)}
    assert list(store.reported(NODE, [other.address])) == [other.address]


def test_a_device_without_record_or_on_no_bus_is_not_given(store):
    qat, other = accelerator(), accelerator('0000:71:00.0')
    store.sync(NODE, [qat, other], state_store.READY)
    provider_devices.record(store, NODE, [qat])
    store.mark_missing(NODE, qat.address)
    host = provider_devices.recorded(store, [NODE])
    assert host.devices == {}
    assert host.unrecorded == {
        providers.provider_uuid(NODE, other.address): (NODE, other.address)}
    # A cycle that could read nothing forgets every record.
    provider_devices.record(store, NODE, [other])
    assert len(provider_devices.recorded(store, [NODE]).devices) == 1
    store.clear_reported(NODE)
    assert provider_devices.recorded(store, [NODE]).devices == {}


def test_remote_devices_are_in_the_same_lookup(store):
    local = accelerator()
    store.sync(NODE, [local], state_store.READY)
    provider_devices.record(store, NODE, [local])
    remote = accelerator('0000:90:00.0')
    remote_devices.record(store, NODE, 'http://127.0.0.1:9', 'qat',
                          remote_devices.UP, [remote.to_hardware(NODE)])
    rp = remote_devices.provider_uuid(NODE, remote.address)
    device = provider_devices.recorded(store, [NODE]).devices[rp]
    assert device.endpoint == 'http://127.0.0.1:9'
    assert device.address == remote.address
    assert set(provider_devices.known(store, NODE)) == {
        rp, providers.provider_uuid(NODE, local.address)}
    found = provider_devices.found(store, NODE, [local])
    assert provider_devices.find(found, NODE, rp) == device
    assert provider_devices.find(found, NODE, local.address).address == (
        local.address)
    with pytest.raises(provider_devices.NotFound, match='is a unit of'):
        provider_devices.find(found, NODE, '0000:70:00.1')


def test_each_unit_records_what_it_is_in_the_guest(store):
    # A vendor-VFIO vGPU GPU: its driver (nvidia_gpu, asked through the
    # contract's unit_hostdev hook) keeps its VFs unmanaged.
    vfio = accelerator('0000:3b:00.0', driver='nvidia_gpu',
                       device_type='GPU', resource_class='VGPU',
                       traits=(), vendor_id='10de', product_id='2335',
                       class_code='030200', capabilities=(
                           ('vgpu_type', '1414'), ('vgpu_framework', 'vfio')))
    books = guests.UnitBooks(assignments.Assignments(store))
    for acc in (accelerator(), vfio):
        books.assign('vm1', provider_devices.local(NODE, acc), 2)
    rps = provider_devices.found(None, NODE, [accelerator(), vfio])
    kinds = {h.unit: h.kind for h in books.hostdevs('vm1', rps)}
    assert kinds == {'0000:70:00.1': device_model.HOSTDEV_PCI,
                     '0000:70:00.2': device_model.HOSTDEV_PCI,
                     '0000:3b:00.1': device_model.HOSTDEV_PCI_UNMANAGED,
                     '0000:3b:00.2': device_model.HOSTDEV_PCI_UNMANAGED}
    assert unit_work.hostdev_kind(
        None, '7f1c0c6e-8d3a-4c5e-9a52-1f0e6b7d2a11'
    ) == device_model.HOSTDEV_MDEV
