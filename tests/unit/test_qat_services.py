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

"""lifecycle.update_setting of QAT services: ``--qat-services``'s work."""

import os

from oslo_config import cfg
import pytest

from cyborg_nova import conf as conf_module
from cyborg_nova import lifecycle
from cyborg_nova import providers
from cyborg_nova import store as state_store
import privsep
from privsep import qat
from tests.unit.privsep import fakesysfs

NODE = 'cn1'
QAT_4XXX = '0000:6b:00.0'    # qat-gen4-host: up, sym;asym, 16 VFs
QAT_6XXX = '0000:f7:00.0'    # down, decomp
C62X = '0000:3d:00.0'


class Host:
    def __init__(self, root, store_path):
        self.root = root
        self.conf = cfg.ConfigOpts()
        conf_module.register_opts(self.conf)
        self.conf([])
        self.conf.set_override('sysfs_root', root, group='cyborg_nova')
        self.store = state_store.StateStore(store_path)
        self.consumers = {}
        self.written = []

    def allocations_for(self, rp_uuid):
        return self.consumers.get(rp_uuid, {})

    def set_services(self, address, services):
        self.written.append((address, services))
        return qat._set_services(self.root, address, services)

    def update(self, services, address=None, name='intel_qat',
               set_services=None):
        return lifecycle.update_setting(
            self.conf, self.store, NODE, name, 'services', services,
            self.allocations_for, set_services or self.set_services,
            address)

    def services(self, address):
        return fakesysfs.read(fakesysfs.device(
            self.root, address, 'qat', 'cfg_services')).strip()

    def state(self, address):
        return self.store.devices(NODE)[address].state


@pytest.fixture
def host(tmp_path):
    root = fakesysfs.build(str(tmp_path / 'sys'), 'qat-gen4-host')
    return Host(root, str(tmp_path / 'state.sqlite'))


def test_a_down_device_is_configured(host):
    done = host.update('dc;sym', QAT_6XXX)
    assert done == ['%s: services decomp -> sym;dc; bring it up to use '
                    'them' % QAT_6XXX]
    assert host.written == [(QAT_6XXX, 'sym;dc')]
    assert host.services(QAT_6XXX) == 'sym;dc'
    # Held while it changed, then back to what a new device starts as.
    assert host.state(QAT_6XXX) == state_store.INACTIVE


def test_a_device_that_is_up_is_refused_with_how_to_stop_it(host):
    with pytest.raises(lifecycle.LifecycleError) as info:
        host.update('dc', QAT_4XXX)
    state_file = os.path.join(host.root, 'bus', 'pci', 'devices', QAT_4XXX,
                              'qat', 'state')
    message = str(info.value)
    assert message.startswith(
        'QAT device %s is up: the kernel changes its services only while '
        'it is down; nothing was changed.' % QAT_4XXX)
    assert '    echo down > %s\n' % state_file in message
    assert ('cyborg-nova driver-update intel_qat --num-vfs 16 --device %s'
            % QAT_4XXX) in message
    assert host.written == []
    assert host.services(QAT_4XXX) == 'sym;asym'


def test_all_devices_checked_before_any_is_changed(host):
    # Without --device, every device with configurable services is a
    # target: the 4xxx, 420xx and 6xxx that are up refuse the whole
    # change, the 6xxx that is down included. The C62x is no target.
    with pytest.raises(lifecycle.LifecycleError,
                       match='QAT device %s is up' % QAT_4XXX):
        host.update('dc')
    assert host.written == []
    assert host.services(QAT_6XXX) == 'decomp'


def test_all_devices_configured_when_all_are_down(host):
    for address in ('0000:6b:00.0', '0000:70:00.0', '0000:e8:00.0',
                    '0000:f2:00.0'):
        with open(fakesysfs.device(host.root, address, 'qat', 'state'),
                  'w') as f:
            f.write('down\n')
    targets = ['0000:6b:00.0', '0000:70:00.0', '0000:e8:00.0',
               '0000:f2:00.0', QAT_6XXX]
    done = host.update('dc')
    assert [line.split(': ')[0] for line in done] == targets
    assert host.written == [(a, 'dc') for a in targets]
    assert [host.services(a) for a in targets] == ['dc'] * 5
    assert not os.path.exists(fakesysfs.device(host.root, C62X, 'qat'))


@pytest.mark.parametrize('address, services, reason', [
    (QAT_6XXX, 'sym;asym;dc;decomp', 'at most 3'),
    (QAT_6XXX, 'SYM', "'SYM' not accepted by a 6XXX"),
    (C62X, 'sym', 'a C62X has no configurable services'),
    ('0000:99:00.0', 'sym', 'driver intel_qat has no device at '
     '0000:99:00.0'),
])
def test_bad_services_or_device_refused(host, address, services, reason):
    with pytest.raises(lifecycle.LifecycleError, match=reason):
        host.update(services, address)
    assert host.written == []
    assert host.services(QAT_6XXX) == 'decomp'


def test_another_driver_refused(host):
    with pytest.raises(lifecycle.LifecycleError,
                       match='applies to the intel_qat driver only'):
        host.update('sym', name='nic_sriov')


def test_in_use_refused(host):
    uuid = providers.provider_uuid(NODE, QAT_6XXX)
    host.consumers[uuid] = {'an-instance': {}}
    with pytest.raises(lifecycle.LifecycleError,
                       match='in use by instance\\(s\\) an-instance'):
        host.update('sym', QAT_6XXX)
    assert host.written == []


def test_a_refusal_of_the_daemon_gives_the_state_back(host):
    host.update('sym', QAT_6XXX)
    host.store.set_state(NODE, QAT_6XXX, state_store.READY, 'mine')

    def came_up(address, services):
        raise privsep.NotPossible('QAT device %s is up' % address)
    with pytest.raises(lifecycle.LifecycleError, match='refused: QAT '
                       'device %s is up' % QAT_6XXX):
        host.update('dc', QAT_6XXX, set_services=came_up)
    assert host.state(QAT_6XXX) == state_store.READY
    assert host.store.devices(NODE)[QAT_6XXX].reason == 'mine'
