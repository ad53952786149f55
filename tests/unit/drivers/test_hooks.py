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


"""The driver contract's optional hooks: their defaults, and the library
asking them (units of an emulated GPU, restore, offered services).
"""

from oslo_config import cfg
import pytest

from cyborg_drivers import base
from cyborg_drivers import discovery
from cyborg_drivers.fake import driver as fake
from cyborg_drivers import loader
from cyborg_drivers.nvidia import vgpu
from cyborg_drivers.qat import driver as qat_driver
from cyborg_nova import conf as conf_module
from cyborg_nova import lifecycle
from cyborg_nova import restore
from cyborg_nova import services
from cyborg_nova import store as state_store
from cyborg_nova import unit_work
from tests.unit import test_unit_work

NODE = 'cn1'
T4 = '0000:b0:00.0'


class Minimal(base.AcceleratorDriver):
    name = 'minimal'

    def discover(self, snapshot):
        return []


def test_defaults_say_no():
    driver = Minimal(cfg.ConfigOpts())
    acc = object()
    assert Minimal.unit_ops() is None
    assert driver.prepare_units('/sys', acc, ['0000:01:00.0']) == []
    assert driver.clear_unit('/sys', '0000:01:00.0') is False
    assert driver.migratable(acc, '0000:01:00.0') is False
    assert driver.offered(acc) == []
    assert driver.restore('/sys', '0000:01:00.0') == []
    assert driver.unit_hostdev(acc, '0000:01:00.1') == 'pci'
    assert driver.unit_hostdev(
        acc, '7f1c0c6e-8d3a-4c5e-9a52-1f0e6b7d2a11') == 'mdev'
    assert driver.hotplug_refusal(acc) is None
    assert driver.SETTINGS == () and driver.on_host_bus
    assert driver.has_setting(acc, 'services') is False
    assert driver.read_setting(acc, 'services') is None
    # Every family scrubs a PCI function with the kernel's reset, and a
    # mediated device needs none; no other step.
    assert Minimal.SCRUB_STEPS == ('flr',)
    resets = []

    class Ops:
        def reset_function(self, address):
            resets.append(address)
            return 'flr bus'
    assert driver.scrub('/sys', acc, '0000:01:00.1', 'flr', Ops()) == (
        'reset 0000:01:00.1 (flr bus)')
    assert resets == ['0000:01:00.1']
    assert driver.scrub('/sys', acc, '7f1c0c6e-8d3a-4c5e-9a52-1f0e6b7d2a11',
                        'flr', Ops()) == (
        'nothing to reset: 7f1c0c6e-8d3a-4c5e-9a52-1f0e6b7d2a11 is a '
        'mediated device')
    with pytest.raises(base.NotSupported, match="no scrub step 'wipe'"):
        driver.scrub('/sys', acc, '0000:01:00.1', 'wipe', Ops())
    assert resets == ['0000:01:00.1']
    with pytest.raises(base.NotSupported, match="no setting 'services'"):
        driver.check_setting('/sys', acc, 'services', 'sym')
    with pytest.raises(base.NotSupported, match="no setting 'services'"):
        driver.apply_setting('0000:01:00.0', 'services', 'sym')


def test_a_driver_without_the_setting_names_those_with_it():
    assert lifecycle._no_such_setting('nic_sriov', 'services') == (
        'the services setting applies to the intel_qat driver only, not '
        'nic_sriov')
    assert lifecycle._no_such_setting('intel_qat', 'colour') == (
        'no installed driver has a colour setting (asked of intel_qat)')


def test_an_emulated_gpu_makes_its_vgpus_through_the_one_it_emulates(
        tmp_path):
    conf = cfg.ConfigOpts()
    conf_module.register_opts(conf)
    conf([])
    (driver,) = loader.load(conf, ['fake'])
    loader.register_opts(conf, [fake.FakeDriver])
    root = str(tmp_path / 'fake-sys')
    conf.set_override('host_profile', 'mdev-vf-host', 'cyborg_fake')
    conf.set_override('tree_path', root, 'cyborg_fake')
    conf.set_override('emulated_drivers', ['nvidia_gpu'], 'cyborg_fake')
    # The emulated driver's options are read from the same config.
    loader.load(conf, ['nvidia_gpu'])
    conf.set_override('enabled_vgpu_types', ['nvidia-222'],
                      'cyborg_nvidia_gpu')
    # The host's own bus is empty: the emulated hardware is elsewhere.
    host = tmp_path / 'host'
    (host / 'bus' / 'pci' / 'devices').mkdir(parents=True)
    found = discovery.Discoverer([driver], str(host)).discover()
    t4 = found.by_address()[T4]
    assert t4.driver == 'fake'
    kernel = test_unit_work.vgpu_kernel.VgpuKernel(
        root, test_unit_work.TreeOps(root))
    units = list(t4.units[:1])
    made = unit_work.prepare(root, t4, units, kernel, drivers=[driver])
    assert made == units
    assert vgpu.mdev_parent(root, units[0]) == (T4, 'nvidia-222')
    # Asked of the drivers given: the fake passes it to the emulated one.
    assert unit_work.retire(root, units, kernel, drivers=[driver]) == units
    assert vgpu.mdev_parent(root, units[0]) is None
    # A driver not among those given is not asked: nothing is made.
    assert unit_work.prepare(root, t4, units, kernel, drivers=[]) == []
    assert services.offered(t4, driver) == ['vGPU nvidia-222']


class Unrestorable(qat_driver.IntelQatDriver):
    def restore(self, sysfs_root, address, ops=None):
        return ['its services are gone'] if address == '0000:70:00.0' \
            else []


def test_a_device_its_driver_cannot_restore_is_fenced(host_tree, tmp_path,
                                                      monkeypatch):
    root = host_tree('crypto-nic-host')
    conf = cfg.ConfigOpts()
    conf([])
    drivers = loader.load(conf, ['intel_qat'])
    store = state_store.StateStore(str(tmp_path / 'state.sqlite'))
    found = discovery.Discoverer(drivers, root).discover().accelerators
    store.sync(NODE, found, state_store.READY)
    unchanged = restore.restore_vfs(store, NODE, root, None, dict.get,
                                    drivers=drivers)
    assert unchanged == []
    # Without drivers given, the installed one each row names is asked.
    assert restore.restore_vfs(store, NODE, root, None, dict.get) == []
    asked = []

    def unconfigured(name):
        asked.append(name)
        return Unrestorable(conf)
    monkeypatch.setattr(loader, 'unconfigured', unconfigured)
    [outcome] = restore.restore_vfs(store, NODE, root, None, dict.get)
    assert asked and set(asked) == {'intel_qat'}
    assert outcome.reason == 'not restored at start: its services are gone'
    [outcome] = restore.restore_vfs(store, NODE, root, None, dict.get,
                                    drivers=[Unrestorable(conf)])
    assert (outcome.address, outcome.action) == ('0000:70:00.0',
                                                 restore.FENCED)
    row = store.devices(NODE)['0000:70:00.0']
    assert row.state == state_store.FAILED
    assert row.reason == 'not restored at start: its services are gone'
    assert store.devices(NODE)['0000:6b:00.0'].state == state_store.READY


def test_what_each_family_offers(host_tree):
    root = host_tree('mixed-host')
    conf = cfg.ConfigOpts()
    conf([])
    drivers = loader.load(conf, loader.default_names())
    found = discovery.Discoverer(drivers, root).discover().accelerators
    rows = services.rows(found, 0.0, drivers)
    assert {r.address: r.services for r in rows} == {
        '0000:3b:00.0': ('whole device (PGPU)',),
        '0000:3c:00.0': ('function d8424dc4a4a3c413f89e433683f9040b',),
        '0000:86:00.0': ('function 6f774925d48e5523a6ea12fe4d11534f',),
        '0000:af:00.0': ('whole device (PGPU)',),
        '0000:d8:00.0': ('whole device (CUSTOM_QAT)',)}
    # The same without the drivers: the installed ones are asked.
    assert services.rows(found, 0.0) == rows
    # QAT services, where the kernel shows them.
    root = host_tree('qat-gen4-host')
    (qat,) = loader.load(conf, ['intel_qat'])
    by_address = discovery.Discoverer([qat], root).discover().by_address()
    assert services.offered(by_address['0000:6b:00.0']) == ['asym', 'sym']


def test_the_gpu_family_says_how_its_vgpu_units_go_into_a_guest():
    """The library asks, by the device's driver name, and never decides."""
    from tests.unit.test_remote_devices import accelerator

    def gpu(*capabilities):
        return accelerator('0000:3b:00.0', driver='nvidia_gpu',
                           device_type='GPU', resource_class='VGPU',
                           vendor_id='10de', product_id='2335',
                           capabilities=capabilities)
    vfio = gpu(('vgpu_type', '1414'), (vgpu.FRAMEWORK, vgpu.VFIO))
    mdev = gpu(('vgpu_type', 'nvidia-222'), (vgpu.FRAMEWORK, vgpu.MDEV))
    whole = gpu()
    assert unit_work.hostdev_kind(vfio, '0000:3b:00.4') == 'pci-unmanaged'
    assert unit_work.hostdev_kind(whole, '0000:3b:00.0') == 'pci'
    assert unit_work.hostdev_kind(
        mdev, '7f1c0c6e-8d3a-4c5e-9a52-1f0e6b7d2a11') == 'mdev'
    for split in (vfio, mdev):
        assert 'given at spawn only' in unit_work.hotplug_refusal(split)
    assert unit_work.hotplug_refusal(whole) is None
    # A driver not installed here (an out-of-process driver's device):
    # the contract's defaults.
    remote = accelerator(driver='remote_thing', capabilities=(
        (vgpu.FRAMEWORK, vgpu.VFIO),))
    assert unit_work.hostdev_kind(remote, '0000:70:00.1') == 'pci'
    assert unit_work.hotplug_refusal(remote) is None
