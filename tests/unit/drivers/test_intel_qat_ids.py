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

"""intel_qat: every QAT id the upstream kernel binds, and their services.

The ids below are written out by hand from the kernel's sources (the
``pci_device_id`` tables of drivers/crypto/intel/qat/qat_*/adf_drv.c,
qat_common/adf_accel_devices.h and include/linux/pci_ids.h), not read
from the driver, so a wrong or missing id in the driver fails here.
"""

import os
import re

from oslo_config import cfg
import pytest

from cyborg_drivers import discovery
from cyborg_drivers import loader
from cyborg_drivers.qat import driver as qat_driver
from cyborg_drivers.qat import products as intel_qat
from cyborg_drivers import sysfs

# PF id, product, PF driver, VF id, upstream VF driver, VF offset (the
# hardware's), whether the kernel gives the PF qat/.
KERNEL_QAT = [
    (0x0435, 'DH895XCC', 'dh895xcc', 0x0443, 'dh895xccvf', 8, False),
    (0x37c8, 'C62X', 'c6xx', 0x37c9, 'c6xxvf', 8, False),
    (0x19e2, 'C3XXX', 'c3xxx', 0x19e3, 'c3xxxvf', 8, False),
    (0x4940, '4XXX', '4xxx', 0x4941, None, 1, True),
    (0x4942, '401XX', '4xxx', 0x4943, None, 1, True),
    (0x4944, '402XX', '4xxx', 0x4945, None, 1, True),
    (0x4946, '420XX', '420xx', 0x4947, None, 1, True),
    (0x4948, '6XXX', '6xxx', 0x4949, None, 1, True),
]
# The services each generation's kernel is configured with in the trees
# below, and the traits they give.
SERVICES = {'4xxx': ('dc', ('CUSTOM_QAT', 'CUSTOM_QAT_DC')),
            '420xx': ('sym;asym', ('CUSTOM_QAT', 'CUSTOM_QAT_ASYM',
                                   'CUSTOM_QAT_SYM')),
            '6xxx': ('decomp;sym', ('CUSTOM_QAT', 'CUSTOM_QAT_DECOMP',
                                    'CUSTOM_QAT_SYM'))}
PF = '0000:5e:00.0'


def discover(root, names=('intel_qat',)):
    conf = cfg.ConfigOpts()
    conf([])
    return discovery.Discoverer(loader.load(conf, list(names)),
                                root).discover()


def function(vendor, device, address=PF):
    return sysfs.PciFunction(address, vendor, device, 0x0b4000, vendor, 0,
                             None, '/nonexistent')


def test_the_driver_knows_every_kernel_id_and_no_other():
    assert {pf: (p.name, p.pf_driver, p.vf_device, p.vf_driver)
            for pf, p in intel_qat.PRODUCTS.items()} == {
        pf: (name, driver, vf, vf_driver)
        for pf, name, driver, vf, vf_driver, _, _ in KERNEL_QAT}
    assert {pf for pf, p in intel_qat.PRODUCTS.items() if p.services} == {
        pf for pf, *_, has_qat in KERNEL_QAT if has_qat}


@pytest.mark.parametrize('pf, name, driver, vf, vf_driver, offset, has_qat',
                         KERNEL_QAT)
def test_each_kernel_product_is_discovered(host_tree, pf, name, driver, vf,
                                           vf_driver, offset, has_qat):
    device = {'address': PF, 'vendor': 0x8086, 'device': pf,
              'class': 0x0b4000, 'numa_node': 1, 'driver': driver,
              'sriov': {'totalvfs': 16, 'numvfs': 16, 'vf_device': vf,
                        'vf_driver': vf_driver, 'offset': offset}}
    if has_qat:
        device['qat'] = {'cfg_services': SERVICES[driver][0]}
    root = host_tree({'name': 'one-qat', 'devices': [
        {'address': '0000:00:00.0', 'vendor': 0x8086, 'device': 0x2020,
         'class': 0x060000, 'numa_node': 0}, device]})
    result = discover(root)
    (qat,) = result.accelerators
    assert result.problems == {}
    assert (qat.address, qat.resource_class, qat.device_type, qat.total,
            qat.numa_node, qat.kernel_driver) == (
        PF, 'CUSTOM_QAT', 'CRYPTO', 16, 1, driver)
    assert qat.product_id == '%04x' % pf
    # The hardware's VF layout: offset 8 puts the 16 VFs in slots 1-2,
    # offset 1 right after the PF, into slot 2.
    first = ['0000:5e:01.0', '0000:5e:00.1'][offset == 1]
    last = ['0000:5e:02.7', '0000:5e:02.0'][offset == 1]
    assert (qat.units[0], qat.units[-1], len(set(qat.units))) == (
        first, last, 16)
    assert dict(qat.capabilities)['generation'] == name
    assert not qat.setup_required
    assert os.path.isdir(os.path.join(root, 'bus', 'pci', 'devices', PF,
                                      'qat')) is has_qat
    if has_qat:
        assert qat.traits == SERVICES[driver][1]
    else:
        assert qat.traits == ('CUSTOM_QAT',)
        assert 'services' not in dict(qat.capabilities)


@pytest.mark.parametrize('pf, name, driver, vf, vf_driver, offset, has_qat',
                         KERNEL_QAT)
def test_pf_and_vf_ids_claimed_and_nothing_else(pf, name, driver, vf,
                                                vf_driver, offset, has_qat):
    qat = qat_driver.IntelQatDriver(cfg.ConfigOpts())
    assert qat.claims(function(0x8086, pf))
    assert qat.claims(function(0x8086, vf))
    # The same ids of another vendor.
    assert not qat.claims(function(0x15b3, pf))
    assert not qat.claims(function(0x15b3, vf))


@pytest.mark.parametrize('device', [
    # The Intel ids next to the QAT ones, and an E810 NIC.
    0x0434, 0x0436, 0x0442, 0x0444, 0x37c7, 0x37ca, 0x19e1, 0x19e4, 0x493f,
    0x494a, 0x1592])
def test_other_intel_ids_not_claimed(device):
    qat = qat_driver.IntelQatDriver(cfg.ConfigOpts())
    assert not qat.claims(function(0x8086, device))


def test_a_vf_without_its_pf_is_a_problem_not_an_accelerator(host_tree):
    # What a guest given a 4xxx VF sees: the VF id, no physfn link.
    root = host_tree({'name': 'guest', 'devices': [
        {'address': '0000:00:05.0', 'vendor': 0x8086, 'device': 0x4941,
         'class': 0x0b4000}]})
    result = discover(root)
    assert result.accelerators == ()
    assert 'QAT VF 8086:4941 without its PF' in result.problems[
        '0000:00:05.0']


@pytest.mark.parametrize('pf, text, written', [
    (0x4940, 'sym;asym', 'asym;sym'),
    (0x4940, 'asym;sym', 'asym;sym'),
    (0x4940, 'dc', 'dc'),
    (0x4940, 'dc;sym', 'sym;dc'),
    (0x4940, 'dc;asym', 'asym;dc'),
    (0x4940, 'dcc', 'dcc'),
    (0x4942, 'sym', 'sym'),
    (0x4944, 'asym', 'asym'),
    (0x4946, 'sym;dc', 'sym;dc'),
    (0x4948, 'decomp', 'decomp'),
    (0x4948, 'dc;decomp;sym', 'sym;dc;decomp'),
    (0x4948, 'dc;sym;asym', 'asym;sym;dc'),
    (0x4948, 'dcc', 'dcc'),
])
def test_services_the_kernel_takes_in_its_order(pf, text, written):
    assert intel_qat.parse_services(intel_qat.PRODUCTS[pf], text) == written


@pytest.mark.parametrize('pf, text, reason', [
    (0x4940, 'decomp', "'decomp' not accepted by a 4XXX"),
    (0x4946, 'decomp', "'decomp' not accepted by a 420XX"),
    (0x4940, 'sym;asym;dc', 'at most 2'),
    (0x4948, 'asym;sym;dc;decomp', 'at most 3'),
    (0x4940, 'dcc;sym', 'dcc cannot be combined'),
    (0x4948, 'dc;dcc', 'dcc cannot be combined'),
    (0x4940, 'sym;sym', 'twice'),
    (0x4940, 'SYM', "'SYM' not accepted"),
    (0x4940, 'sym;', "'' not accepted"),
    (0x4940, ' sym', "' sym' not accepted"),
    (0x4940, 'sym\n', "'sym\\\\n' not accepted"),
    (0x4940, 'sym,dc', "'sym,dc' not accepted"),
    (0x4940, '', 'are not services'),
    (0x4940, None, 'are not services'),
    (0x4940, 3, 'are not services'),
    (0x37c8, 'sym', 'a C62X has no configurable services'),
    (0x0435, 'dc', 'a DH895XCC has no configurable services'),
])
def test_services_the_kernel_refuses(pf, text, reason):
    with pytest.raises(ValueError, match=reason):
        intel_qat.parse_services(intel_qat.PRODUCTS[pf], text)


def test_qat_gen4_host(host_tree):
    result = discover(host_tree('qat-gen4-host'))
    assert [(a.address, a.resource_class, a.total, a.numa_node,
             dict(a.capabilities)['generation'], a.setup_required)
            for a in result.accelerators] == [
        ('0000:3d:00.0', 'CUSTOM_QAT', 16, 0, 'C62X', False),
        ('0000:6b:00.0', 'CUSTOM_QAT', 16, 0, '4XXX', False),
        ('0000:70:00.0', 'CUSTOM_QAT', 0, 0, '4XXX', True),
        ('0000:e8:00.0', 'CUSTOM_QAT', 16, 1, '420XX', False),
        ('0000:f2:00.0', 'CUSTOM_QAT', 16, 1, '6XXX', False),
        ('0000:f7:00.0', 'CUSTOM_QAT', 0, 1, '6XXX', True),
    ]
    by = result.by_address()
    assert by['0000:3d:00.0'].traits == ('CUSTOM_QAT',)
    assert by['0000:6b:00.0'].traits == ('CUSTOM_QAT', 'CUSTOM_QAT_ASYM',
                                         'CUSTOM_QAT_SYM')
    assert by['0000:70:00.0'].traits == ('CUSTOM_QAT', 'CUSTOM_QAT_DC')
    assert by['0000:e8:00.0'].traits == ('CUSTOM_QAT', 'CUSTOM_QAT_ASYM',
                                         'CUSTOM_QAT_DC')
    assert by['0000:f2:00.0'].traits == ('CUSTOM_QAT', 'CUSTOM_QAT_ASYM',
                                         'CUSTOM_QAT_DC', 'CUSTOM_QAT_SYM')
    assert by['0000:f7:00.0'].traits == ('CUSTOM_QAT', 'CUSTOM_QAT_DECOMP')
    # The 6xxx being reconfigured is down: unhealthy, so fully reserved.
    assert 'is \'down\', not up' in by['0000:f7:00.0'].problems[0]
    assert [a.address for a in result.accelerators if a.problems] == [
        '0000:f7:00.0']
    # The C62x's VFs are on c6xxvf; the newer ones' have no host driver.
    assert by['0000:3d:00.0'].units[0] == '0000:3d:01.0'
    assert by['0000:e8:00.0'].units[:2] == ('0000:e8:00.1', '0000:e8:00.2')
    # The ConnectX-6 and the platform devices are nobody's QAT.
    assert result.problems == {}


# -- the documentation -------------------------------------------------------

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
ID = re.compile(r'``8086:([0-9a-f]{4})``')


def qat_doc_rows():
    with open(os.path.join(REPO, 'doc', 'source', 'admin',
                           'device-ids.rst')) as f:
        text = f.read()
    section = text[text.index('.. _device-ids-qat:'):]
    section = section[:section.index('.. _device-ids-', 1)]
    # Rows after the header; the table ends at the first blank line.
    return [[c.strip() for c in row.split('\n\n')[0].split('\n     - ')]
            for row in section.split('   * - ')[2:]]


def test_the_qat_doc_lists_every_id_as_reported():
    rows = {int(ID.fullmatch(cells[0]).group(1), 16): cells
            for cells in qat_doc_rows()}
    assert len(rows) == len(qat_doc_rows())
    assert set(rows) == set(intel_qat.PRODUCTS) | set(intel_qat.VF_PRODUCTS)
    for pf, product in intel_qat.PRODUCTS.items():
        cells = rows[pf]
        assert cells[1].lower() == 'qat %s' % product.name.lower()
        assert cells[2] == '``%s``' % product.pf_driver
        reported = cells[3]
        alias = re.fullmatch(r'as ``8086:([0-9a-f]{4})``', reported)
        if alias:
            other = intel_qat.PRODUCTS[int(alias.group(1), 16)]
            assert other.services == product.services
            reported = rows[int(alias.group(1), 16)][3]
        assert reported.startswith('``CUSTOM_QAT``; ``CUSTOM_QAT``')
        assert 'units:\n       its VFs' in reported or (
            'units: its VFs' in reported)
        if product.services:
            assert '``CUSTOM_QAT_<SERVICE>``' in reported
            for service in product.services:
                assert '``%s``' % service in reported
        else:
            assert 'SERVICE' not in reported
        vf = rows[product.vf_device]
        assert vf[1:] == ['its VF', '``%s``' % product.vf_driver
                          if product.vf_driver
                          else 'none (``vfio-pci`` for guests)',
                          'a unit of its PF']
