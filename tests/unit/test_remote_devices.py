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

"""Out-of-process devices: the model round trip, the store, the rules."""

import dataclasses

import pytest

from cyborg_drivers import device as device_model
from cyborg_nova import remote_devices
from cyborg_nova import store as state_store

NODE = 'cn1'


def accelerator(address='0000:70:00.0', vfs=2, **fields):
    units = tuple('%s.%d' % (address[:-2], n + 1) for n in range(vfs))
    return device_model.Accelerator(**dict(dict(
        address=address, driver='intel_qat', device_type='CRYPTO',
        resource_class='CUSTOM_QAT', traits=('CUSTOM_QAT_DC',),
        total=vfs, vendor_id='8086', product_id='4940',
        class_code='0b4000', numa_node=1, units=units,
        sriov=device_model.SriovInfo(16, vfs, units)), **fields))


def test_from_hardware_is_the_inverse_of_to_hardware():
    acc = accelerator(problems=('firmware old',), setup_required=True)
    back = device_model.from_hardware(acc.to_hardware(NODE))
    assert back == dataclasses.replace(acc, remote=True)


@pytest.mark.parametrize('spoil, reason', [
    (lambda e: e.pop('pci'), 'KeyError'),
    (lambda e: e['placement'].update(units=['/dev/mem']),
     'not PCI addresses: /dev/mem'),
    (lambda e: e['pci'].update(address=7), 'not PCI addresses: 7'),
    (lambda e: e['placement'].update(total='many'), 'ValueError'),
    (lambda e: e['acc_specs'].update(device_type='TOASTER'), 'TOASTER'),
])
def test_from_hardware_refuses_what_is_not_a_device(spoil, reason):
    entry = accelerator().to_hardware(NODE)
    spoil(entry)
    with pytest.raises(ValueError, match=reason):
        device_model.from_hardware(entry)


@pytest.fixture
def store(tmp_path):
    return state_store.StateStore(str(tmp_path / 'state.sqlite'))


def record(store, endpoint, driver_state, *accelerators, bare=0):
    hardware = [a.to_hardware(NODE) for a in accelerators]
    hardware += [{'uuid': 'bare-%d' % n, 'acc_specs': {}}
                 for n in range(bare)]
    remote_devices.record(store, NODE, endpoint, 'CRYPTO', driver_state,
                          hardware)


def test_recorded_devices_come_back_with_their_driver_state(store):
    record(store, 'http://127.0.0.1:7001', 'UP', accelerator(), bare=2)
    [device] = remote_devices.devices(store, NODE)
    assert device.accelerator.units == ('0000:70:00.1', '0000:70:00.2')
    assert device.state == state_store.READY
    record(store, 'http://127.0.0.1:7001', 'DOWN', accelerator())
    [device] = remote_devices.devices(store, NODE)
    assert device.state == state_store.UNHEALTHY
    assert remote_devices.devices(store, 'other-node') == []


def test_names_and_uuids_never_those_of_local_providers():
    from cyborg_nova import providers
    address = '0000:70:00.0'
    assert remote_devices.provider_uuid(NODE, address) != (
        providers.provider_uuid(NODE, address))
    name = remote_devices.provider_name(NODE, address)
    assert not name.startswith(NODE + providers.NAME_INFIX)
    assert remote_devices.provider_uuid(NODE, address) == (
        remote_devices.provider_uuid(NODE, address))


def test_a_function_is_never_reported_twice(store, caplog):
    record(store, 'http://127.0.0.1:7001', 'DOWN', accelerator())
    record(store, 'http://127.0.0.1:7002', 'UP', accelerator(),
           accelerator('0000:6b:00.0'))
    found = remote_devices.devices(store, NODE)
    # The answering driver's devices win over the DOWN one's.
    assert sorted((d.endpoint, d.address) for d in found) == [
        ('http://127.0.0.1:7002', '0000:6b:00.0'),
        ('http://127.0.0.1:7002', '0000:70:00.0')]
    # A local device's VF is a remote device's unit: left out.
    local = accelerator('0000:6b:00.0', vfs=0,
                        functions=('0000:70:00.1',))
    found = remote_devices.devices(store, NODE, [local])
    assert [d.address for d in found] == []
    assert 'another driver reports' in caplog.text


class Fencer:
    """Records what the agent's fencer would write."""

    def __init__(self):
        self.applied = []

    def apply(self, address, uuid, state, accelerator):
        self.applied.append((address, uuid, state))


def test_the_agent_records_and_fences_one_driver(store):
    from cyborg_nova.agent import remote_sync
    fencer = Fencer()
    recorder = remote_sync.RemoteRecorder(store, NODE, fencer, list)
    other = accelerator('0000:6b:00.0').to_hardware(NODE)
    recorder('http://127.0.0.1:7002', 'CRYPTO', 'UP', [other])
    recorder('http://127.0.0.1:7001', 'CRYPTO', 'DOWN',
             [accelerator().to_hardware(NODE)])
    # Only the devices of the driver that changed are fenced.
    assert fencer.applied[1:] == [
        ('0000:70:00.0', remote_devices.provider_uuid(NODE, '0000:70:00.0'),
         state_store.UNHEALTHY)]
    assert recorder.known() == [('http://127.0.0.1:7001', 'CRYPTO'),
                                ('http://127.0.0.1:7002', 'CRYPTO')]
    assert remote_sync.RemoteRecorder(store, NODE, None, list)(
        'http://127.0.0.1:7001', 'CRYPTO', 'UP', []) == []
    assert [d.endpoint for d in remote_devices.devices(store, NODE)] == [
        'http://127.0.0.1:7002']


def test_audit_knows_the_units_of_remote_devices(store, tmp_path):
    from oslo_config import cfg

    from cyborg_drivers.fake import hosttree
    from cyborg_nova.cmd import audit as audit_cmd
    from cyborg_nova import conf as cn_conf
    root = str(tmp_path / 'sys')
    hosttree.build_tree('crypto-nic-host', root)
    conf = cfg.ConfigOpts()
    conf([])
    cn_conf.register_opts(conf)
    conf.set_override('sysfs_root', root, 'cyborg_nova')
    conf.set_override('enabled_drivers', ['nvidia_gpu'], 'cyborg_nova')
    record(store, 'http://127.0.0.1:7001', 'UP', accelerator())
    units = audit_cmd.discovered_units(conf, store, NODE)
    uuid = remote_devices.provider_uuid(NODE, '0000:70:00.0')
    assert units == {'0000:70:00.1': uuid, '0000:70:00.2': uuid}
