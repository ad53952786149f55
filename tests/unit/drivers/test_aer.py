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

"""PCIe AER counters: the kernel's files parsed, unknown never healthy."""

import json
import os

from oslo_config import cfg
import pytest

from cyborg_drivers import aer
from cyborg_drivers import device as device_model
from cyborg_drivers import discovery
from cyborg_drivers import loader
from tests import aer_sysfs

ALVEO = '0000:d8:00.0'
ALVEO_USER = '0000:d8:00.1'
ALVEO_PORT = '0000:d7:00.0'
A100 = '0000:5f:00.0'
A100_VFS = ('0000:5f:00.4', '0000:5f:00.5', '0000:5f:00.6', '0000:5f:00.7')

# The kernel's aer_dev_correctable of a function that saw two receiver
# errors, as the ABI document shows the layout.
CORRECTABLE = """RxErr 2
BadTLP 0
BadDLLP 0
Rollover 0
Timeout 0
NonFatalErr 0
CorrIntErr 0
HeaderOF 0
TOTAL_ERR_COR 2
"""


def discover(root, *drivers):
    conf = cfg.ConfigOpts()
    conf([])
    return discovery.Discoverer(loader.load(conf, list(drivers)),
                                root).discover().by_address()


def test_the_abi_example_parses():
    assert aer.parse(aer.CORRECTABLE, CORRECTABLE) == (2, (
        ('RxErr', 2), ('BadTLP', 0), ('BadDLLP', 0), ('Rollover', 0),
        ('Timeout', 0), ('NonFatalErr', 0), ('CorrIntErr', 0),
        ('HeaderOF', 0)))
    # The helper the other tests build trees with writes the same.
    assert aer_sysfs.text('correctable', 2, RxErr=2) == CORRECTABLE


@pytest.mark.parametrize('severity', aer.SEVERITIES)
def test_each_file_of_the_kernel_layout(severity):
    text = aer_sysfs.text(severity, 3, **{
        'correctable': {'BadTLP': 1, 'HeaderOF': 2}}.get(
            severity, {'CmpltTO': 1, 'PoisonTLPBlocked': 2}))
    total, counts = aer.parse(severity, text)
    assert total == 3
    assert [c for c in counts if c[1]] == (
        [('BadTLP', 1), ('HeaderOF', 2)] if severity == aer.CORRECTABLE
        else [('CmpltTO', 1), ('PoisonTLPBlocked', 2)])


@pytest.mark.parametrize('text,why', [
    ('', 'no TOTAL_ERR_COR line'),
    ('RxErr 0\nBadTLP 0\n', 'no TOTAL_ERR_COR line'),
    # Another severity's total is not this one's.
    ('RxErr 0\nTOTAL_ERR_FATAL 0\n', 'no TOTAL_ERR_COR line'),
    ('RxErr 0\nTOTAL_ERR_COR -1\n', 'not "<error type> <count>"'),
    ('RxErr zero\nTOTAL_ERR_COR 0\n', 'not "<error type> <count>"'),
    ('RxErr 0 1\nTOTAL_ERR_COR 0\n', 'not "<error type> <count>"'),
    ('TOTAL_ERR_COR 0x10\n', 'not "<error type> <count>"'),
    ('TOTAL_ERR_COR\n', 'not "<error type> <count>"'),
])
def test_garbage_is_refused(text, why):
    with pytest.raises(ValueError, match=why):
        aer.parse(aer.CORRECTABLE, text)


def test_a_function_with_counters(host_tree):
    root = host_tree('fpga-host')
    aer_sysfs.write(root, ALVEO_USER, fatal=1, nonfatal=0, correctable=5,
                    correctable_BadTLP=5)
    read = aer.read_function(aer_sysfs.function_dir(root, ALVEO_USER),
                             ALVEO_USER)
    assert read == aer.AerCounters(
        ALVEO_USER, 1, 0, 5,
        (('fatal', 'CmpltTO', 1), ('correctable', 'BadTLP', 5)))
    assert read.known
    assert read.summary() == (
        '0000:d8:00.1: fatal 1, nonfatal 0, correctable 5 '
        '(CmpltTO 1, BadTLP 5)')


def test_no_files_is_unknown_not_zero(host_tree):
    root = host_tree('fpga-host')
    read = aer.read_function(aer_sysfs.function_dir(root, ALVEO), ALVEO)
    assert (read.fatal, read.nonfatal, read.correctable) == (None,) * 3
    assert not read.known
    assert read.reason == aer.NO_AER
    assert read.summary() == '0000:d8:00.0: unknown (%s)' % aer.NO_AER


def test_garbage_in_one_file_leaves_that_severity_unknown(host_tree):
    root = host_tree('fpga-host')
    aer_sysfs.write(root, ALVEO, fatal=0, nonfatal=4, correctable=0)
    path = aer_sysfs.function_dir(root, ALVEO)
    with open(os.path.join(path, 'aer_dev_correctable'), 'wb') as f:
        f.write(b'RxErr \xff\xfe\nTOTAL_ERR_COR 0\n')
    read = aer.read_function(path, ALVEO)
    assert (read.fatal, read.nonfatal, read.correctable) == (0, 4, None)
    assert not read.known
    assert read.reason.startswith(
        "aer_dev_correctable is not in the kernel's format")
    assert 'correctable unknown' in read.summary()


def test_an_unreadable_file_is_unknown(host_tree):
    root = host_tree('fpga-host')
    aer_sysfs.write(root, ALVEO)
    path = aer_sysfs.function_dir(root, ALVEO)
    # Unreadable even by root (the tests may run as root): a directory.
    os.unlink(os.path.join(path, 'aer_dev_nonfatal'))
    os.mkdir(os.path.join(path, 'aer_dev_nonfatal'))
    read = aer.read_function(path, ALVEO)
    assert (read.fatal, read.nonfatal, read.correctable) == (0, None, 0)
    assert read.reason.startswith('aer_dev_nonfatal cannot be read')


def test_a_huge_file_is_not_read_whole(host_tree):
    root = host_tree('fpga-host')
    aer_sysfs.write(root, ALVEO)
    path = aer_sysfs.function_dir(root, ALVEO)
    with open(os.path.join(path, 'aer_dev_fatal'), 'w') as f:
        f.write('DLP 0\n' * 100000 + 'TOTAL_ERR_FATAL 0\n')
    read = aer.read_function(path, ALVEO)
    assert read.fatal is None and read.nonfatal == 0
    assert 'longer than' in read.reason


def test_a_missing_fatal_file_says_no_aer_even_if_others_exist(host_tree):
    # The kernel shows all three or none; a tree with only some is read
    # as the kernel would have it: no AER.
    root = host_tree('fpga-host')
    aer_sysfs.write(root, ALVEO, nonfatal=3)
    os.unlink(os.path.join(aer_sysfs.function_dir(root, ALVEO),
                           'aer_dev_fatal'))
    read = aer.read_function(aer_sysfs.function_dir(root, ALVEO), ALVEO)
    assert read == aer.AerCounters(ALVEO, reason=aer.NO_AER)


def test_discovery_reads_every_function_of_an_accelerator(host_tree):
    root = host_tree('fpga-host')
    aer_sysfs.write(root, ALVEO_USER, fatal=2)
    found = discover(root, 'intel_fpga', 'xilinx_fpga')
    alveo = found[ALVEO]
    # The management function (no AER here: unknown) and the user
    # function, which is also its unit.
    assert [(c.address, c.fatal) for c in alveo.aer] == [
        (ALVEO, None), (ALVEO_USER, 2)]
    assert alveo.to_dict()['aer'][1] == {
        'address': ALVEO_USER, 'known': True, 'fatal': 2, 'nonfatal': 0,
        'correctable': 0, 'errors': [['fatal', 'CmpltTO', 2]],
        'reason': None, 'upstream_port': False}


def test_the_port_above_is_found_from_the_sysfs_hierarchy(host_tree):
    root = host_tree('fpga-host')
    devices = os.path.join(root, 'bus', 'pci', 'devices')
    # The root port the Alveo's slot hangs off, for both its functions.
    assert aer.upstream_port(devices, ALVEO) == ALVEO_PORT
    assert aer.upstream_port(devices, ALVEO_USER) == ALVEO_PORT
    # On a root bus (the virtio NIC): no port, no link errors to read.
    assert aer.upstream_port(devices, '0000:00:04.0') is None
    # Under the BMC's bridge: a port even when not a root port.
    assert aer.upstream_port(devices, '0000:03:00.0') == '0000:02:00.0'


def test_discovery_reads_the_port_above_when_it_has_aer(host_tree):
    root = host_tree('fpga-host')
    aer_sysfs.write(root, ALVEO_USER)
    aer_sysfs.write(root, ALVEO_PORT, fatal=1)
    alveo = discover(root, 'intel_fpga', 'xilinx_fpga')[ALVEO]
    assert [(c.address, c.fatal, c.upstream_port) for c in alveo.aer] == [
        (ALVEO, None, False), (ALVEO_USER, 0, False),
        (ALVEO_PORT, 1, True)]
    assert alveo.aer[2].summary() == (
        '0000:d7:00.0 (the port above): fatal 1, nonfatal 0, correctable 0 '
        '(CmpltTO 1)')
    entry = json.loads(json.dumps(alveo.to_hardware('cn1')))
    assert entry['aer'][2]['upstream_port'] is True
    assert device_model.from_hardware(entry).aer == alveo.aer
    # A port without AER is left out, not shown unknown.
    aer_sysfs.remove(root, ALVEO_PORT)
    alveo = discover(root, 'intel_fpga', 'xilinx_fpga')[ALVEO]
    assert [c.address for c in alveo.aer] == [ALVEO, ALVEO_USER]


def test_discovery_reads_the_vfs_of_a_pf(host_tree):
    root = host_tree('gpu-host')
    aer_sysfs.write(root, A100, correctable=1)
    aer_sysfs.write(root, A100_VFS[2], nonfatal=1)
    found = discover(root, 'nvidia_gpu')
    assert [(c.address, c.nonfatal, c.correctable)
            for c in found[A100].aer] == [
        (A100, 0, 1), (A100_VFS[0], None, None), (A100_VFS[1], None, None),
        (A100_VFS[2], 1, 0), (A100_VFS[3], None, None)]


def test_the_counters_go_through_get_hardware_and_back(host_tree):
    root = host_tree('fpga-host')
    aer_sysfs.write(root, ALVEO_USER, fatal=1, correctable=3)
    alveo = discover(root, 'intel_fpga', 'xilinx_fpga')[ALVEO]
    entry = json.loads(json.dumps(alveo.to_hardware('cn1')))
    assert [c['address'] for c in entry['aer']] == [ALVEO, ALVEO_USER]
    back = device_model.from_hardware(entry)
    assert back.aer == alveo.aer


@pytest.mark.parametrize('bad', [
    {'address': ALVEO, 'fatal': -1},
    {'address': ALVEO, 'fatal': '1'},
    {'address': ALVEO, 'fatal': True},
    {'address': ALVEO, 'errors': [['fatal', 'DLP']]},
    {'address': ALVEO, 'errors': [['fatal', 'DLP', -2]]},
    {'address': ALVEO, 'errors': [['sometimes', 'DLP', 2]]},
    {'fatal': 0},
])
def test_a_bad_served_entry_is_refused(host_tree, bad):
    root = host_tree('fpga-host')
    alveo = discover(root, 'intel_fpga', 'xilinx_fpga')[ALVEO]
    entry = json.loads(json.dumps(alveo.to_hardware('cn1')))
    entry['aer'] = [bad]
    with pytest.raises(ValueError, match='hardware shape'):
        device_model.from_hardware(entry)
