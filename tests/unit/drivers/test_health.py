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

"""Drivers' health checks, on built trees with error state written in."""

import glob
import os

from oslo_config import cfg
import pytest

from cyborg_drivers import loader
from cyborg_drivers import sysfs


def load(name):
    conf = cfg.ConfigOpts()
    conf([])
    (driver,) = loader.load(conf, [name])
    return driver


def checked(driver, root):
    """Each accelerator's address and its health findings."""
    snapshot = sysfs.PciSnapshot(root, claims=driver.claims)
    return {a.address: driver.health(a, snapshot)
            for a in driver.discover(snapshot)}


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        f.write(text)


def device(root, address, *parts):
    return os.path.join(root, 'bus', 'pci', 'devices', address, *parts)


def one(pattern):
    (path,) = glob.glob(pattern)
    return path


# -- QAT ----------------------------------------------------------------------


def test_qat_up_is_healthy(host_tree):
    health = checked(load('intel_qat'), host_tree('crypto-nic-host'))
    assert health == {'0000:6b:00.0': [], '0000:70:00.0': [],
                      '0000:e8:00.0': []}


def test_qat_not_up(host_tree):
    root = host_tree('crypto-nic-host')
    write(device(root, '0000:70:00.0', 'qat', 'state'), 'down\n')
    health = checked(load('intel_qat'), root)
    assert health['0000:70:00.0'] == [
        "QAT device 0000:70:00.0 is 'down', not up (qat/state): stopped or "
        "failed; its VFs cannot be used until it is up again"]
    assert health['0000:6b:00.0'] == health['0000:e8:00.0'] == []


def test_qat_without_state_attribute(host_tree):
    # Kernels before 6.5 have no qat/state: nothing to report.
    root = host_tree('crypto-nic-host')
    os.unlink(device(root, '0000:70:00.0', 'qat', 'state'))
    assert checked(load('intel_qat'), root)['0000:70:00.0'] == []


# -- Intel FPGA ---------------------------------------------------------------


def opae_port_errors(root, address):
    port = one(device(root, address, 'fpga', 'intel-fpga-dev.*',
                      'intel-fpga-port.*'))
    return os.path.join(port, 'errors', 'errors')


def test_fpga_without_error_files_is_healthy(host_tree):
    health = checked(load('intel_fpga'), host_tree('fpga-host'))
    assert health == {'0000:5e:00.0': [], '0000:af:00.0': []}


def test_opae_port_errors(host_tree):
    root = host_tree('fpga-host')
    write(opae_port_errors(root, '0000:5e:00.0'), '0x0\n')
    write(opae_port_errors(root, '0000:af:00.0'), '0x0000000000000010\n')
    health = checked(load('intel_fpga'), root)
    assert health['0000:5e:00.0'] == []
    (reason,) = health['0000:af:00.0']
    assert reason.startswith('FPGA port of 0000:af:00.0 reports errors 0x10 '
                             '(fpga/intel-fpga-dev.1/intel-fpga-port.1/'
                             'errors/errors)')


@pytest.mark.parametrize('text', ['garbage\n', '\n'])
def test_opae_port_errors_unreadable(host_tree, text):
    root = host_tree('fpga-host')
    write(opae_port_errors(root, '0000:5e:00.0'), text)
    (reason,) = checked(load('intel_fpga'), root)['0000:5e:00.0']
    assert 'FPGA port errors of 0000:5e:00.0 unreadable' in reason


def test_dfl_port_errors(host_tree):
    root = host_tree('mixed-host')
    port = one(device(root, '0000:86:00.0', 'fpga_region', 'region*',
                      'dfl-port.*'))
    errors = os.path.join(port, 'errors', 'errors')
    write(errors, '0x0\n')
    assert checked(load('intel_fpga'), root)['0000:86:00.0'] == []
    write(errors, '0x1\n')
    (reason,) = checked(load('intel_fpga'), root)['0000:86:00.0']
    assert 'FPGA port of 0000:86:00.0 reports errors 0x1' in reason
    assert '/dfl-port.' in reason


def test_port_errors_on_a_vf(host_tree):
    # With SR-IOV on, the port is the VF's: its errors count.
    root = host_tree({'name': 'pac-vf', 'devices': [
        {'address': '0000:5e:00.0', 'vendor': 0x8086, 'device': 0x09c4,
         'class': 0x120000, 'driver': 'intel-fpga-pci',
         'sriov': {'totalvfs': 1, 'numvfs': 1, 'vf_device': 0x09c5,
                   'vf_driver': 'intel-fpga-pci'},
         'fpga': {'layout': 'opae',
                  'interface_id': '9346116d-a52d-5ca8-b06a-a9a389ef7c8d',
                  'afu_id': 'd8424dc4-a4a3-c413-f89e-433683f9040b'}}]})
    write(opae_port_errors(root, '0000:5e:00.1'), '0x4\n')
    (reason,) = checked(load('intel_fpga'), root)['0000:5e:00.0']
    assert reason.startswith('FPGA port of 0000:5e:00.1 reports errors 0x4')
