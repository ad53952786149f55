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

"""Discovery survives malformed sysfs trees and says what it skipped.

Each case breaks one thing in a real tree built from a profile and checks
that the broken function is left out (with a reason, logged once) while
every other accelerator of the host is still reported.
"""

import logging
import os
import shutil

from oslo_config import cfg
import pytest

from cyborg_drivers import base
from cyborg_drivers import discovery
from cyborg_drivers import loader
from cyborg_drivers import sysfs

QAT = {'address': '0000:3b:00.0', 'vendor': 0x8086, 'device': 0x4940,
       'class': 0x0b4000, 'driver': '4xxx',
       'sriov': {'totalvfs': 16, 'numvfs': 4, 'vf_device': 0x4941,
                 'vf_driver': 'qat_vfio_pci'}}
QAT2 = dict(QAT, address='0000:3d:00.0')
A100 = {'address': '0000:af:00.0', 'vendor': 0x10de, 'device': 0x20b0,
        'class': 0x030200, 'driver': 'nvidia',
        'sriov': {'totalvfs': 16, 'numvfs': 2, 'vf_device': 0x20b0}}
T4 = {'address': '0000:d8:00.0', 'vendor': 0x10de, 'device': 0x1eb8,
      'class': 0x030200, 'driver': 'nvidia'}
PROFILE = {'name': 'malformed', 'devices': [QAT, QAT2, A100, T4]}
DRIVERS = ['intel_qat', 'nvidia_gpu']


@pytest.fixture
def tree(host_tree):
    return host_tree(PROFILE)


def discover(root, names=DRIVERS):
    conf = cfg.ConfigOpts()
    conf([])
    return discovery.Discoverer(loader.load(conf, names), root).discover()


def dev(root, address, *parts):
    return os.path.join(root, 'bus', 'pci', 'devices', address, *parts)


def addresses(result):
    return [a.address for a in result.accelerators]


def test_intact_tree_reports_everything(tree):
    result = discover(tree)
    assert addresses(result) == ['0000:3b:00.0', '0000:3d:00.0',
                                 '0000:af:00.0', '0000:d8:00.0']
    assert result.problems == {}


@pytest.mark.parametrize('break_it, reason', [
    # No uevent and no vendor file: identity unknown.
    (lambda d: [os.unlink(d('uevent')), os.unlink(d('vendor'))],
     'unreadable or invalid vendor'),
    # Garbage class, no uevent to fall back from.
    (lambda d: [os.unlink(d('uevent')),
                open(d('class'), 'w').write('banana\n')],
     'unreadable or invalid class'),
    # Unreadable attribute even for root: a directory where a file was.
    (lambda d: [os.unlink(d('uevent')), os.unlink(d('device')),
                os.mkdir(d('device'))],
     'unreadable or invalid device'),
])
def test_unreadable_function_is_skipped(tree, break_it, reason):
    break_it(lambda name: dev(tree, '0000:3d:00.0', name))
    result = discover(tree)
    assert '0000:3d:00.0' not in addresses(result)
    assert len(result.accelerators) == 3
    assert result.problems['0000:3d:00.0'] == reason


def test_uevent_missing_falls_back_to_attribute_files(tree):
    os.unlink(dev(tree, '0000:3d:00.0', 'uevent'))
    result = discover(tree)
    qat = result.by_address()['0000:3d:00.0']
    assert qat.kernel_driver == '4xxx'
    assert qat.total == 4


def test_dangling_bus_link(tree):
    target = os.path.realpath(dev(tree, '0000:d8:00.0'))
    shutil.rmtree(target)
    result = discover(tree)
    assert '0000:d8:00.0' not in addresses(result)
    assert result.problems['0000:d8:00.0'] == (
        'dangling link in bus/pci/devices')


def test_not_an_address_in_bus(tree):
    os.mkdir(os.path.join(tree, 'bus', 'pci', 'devices', 'garbage'))
    result = discover(tree)
    assert len(result.accelerators) == 4
    assert result.problems['garbage'] == 'not a PCI address'


def test_vf_whose_pf_is_gone(tree):
    # The A100's VFs carry the PF's device id, so the GPU driver sees
    # them; with the PF gone they must not turn into GPUs of their own.
    pf = os.path.realpath(dev(tree, '0000:af:00.0'))
    shutil.rmtree(pf)
    os.unlink(dev(tree, '0000:af:00.0'))
    result = discover(tree)
    assert addresses(result) == ['0000:3b:00.0', '0000:3d:00.0',
                                 '0000:d8:00.0']
    assert result.problems['0000:af:00.1'] == (
        'VF whose PF 0000:af:00.0 is gone')


def test_virtfn_link_to_missing_vf_is_not_a_unit(tree):
    vf = os.path.realpath(dev(tree, '0000:3b:00.2'))
    shutil.rmtree(vf)
    os.unlink(dev(tree, '0000:3b:00.2'))
    qat = discover(tree).by_address()['0000:3b:00.0']
    assert qat.units == ('0000:3b:00.1', '0000:3b:00.3', '0000:3b:00.4')
    assert qat.total == 3


def test_garbage_sriov_numbers(tree):
    with open(dev(tree, '0000:3b:00.0', 'sriov_totalvfs'), 'w') as f:
        f.write('many\n')
    qat = discover(tree).by_address()['0000:3b:00.0']
    # Not readable as an SR-IOV PF: no VFs, so no units, and setup needed.
    assert qat.sriov is None
    assert qat.total == 0
    assert qat.setup_required


def test_problem_logged_once(tree, caplog):
    os.mkdir(os.path.join(tree, 'bus', 'pci', 'devices', 'junk'))
    with caplog.at_level(logging.WARNING, logger='cyborg_drivers.sysfs'):
        discover(tree)
        discover(tree)
    hits = [r for r in caplog.records if 'junk' in r.getMessage()]
    assert len(hits) == 1


def test_missing_root():
    with pytest.raises(sysfs.NoSysfs) as exc:
        discover('/nonexistent/sys')
    assert 'not a sysfs tree' in str(exc.value)


class ExplodingDriver(base.AcceleratorDriver):
    name = 'exploding'

    def discover(self, snapshot):
        raise RuntimeError('bug in a vendor driver')


def test_driver_bug_does_not_hide_other_drivers(tree):
    conf = cfg.ConfigOpts()
    conf([])
    drivers = [ExplodingDriver(conf)] + loader.load(conf, DRIVERS)
    result = discovery.Discoverer(drivers, tree).discover()
    assert len(result.accelerators) == 4
    assert 'bug in a vendor driver' in result.driver_errors['exploding']


def test_two_drivers_claiming_one_device(tree):
    conf = cfg.ConfigOpts()
    conf(['--config-file', _generic_conf(tree)])
    result = discovery.Discoverer(
        loader.load(conf, ['nvidia_gpu', 'generic']), tree).discover()
    t4 = result.by_address()['0000:d8:00.0']
    assert t4.driver == 'nvidia_gpu'
    assert 'first enabled wins' in result.problems['0000:d8:00.0']


def _generic_conf(tree):
    path = os.path.join(os.path.dirname(tree), 'generic.conf')
    with open(path, 'w') as f:
        f.write('[cyborg_generic]\n'
                'device_spec = {"vendor_id": "10de", "product_id": "1eb8"}\n')
    return path
