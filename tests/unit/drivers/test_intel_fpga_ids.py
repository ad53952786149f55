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

"""intel_fpga: every id the kernel's dfl-pci binds, and OPAE's.

The ids below are written out by hand from the kernel's sources
(drivers/fpga/dfl-pci.c's cci_pcie_id_tbl and its PCIE_SUBDEVICE_ID_*,
PCI_VENDOR_ID_SILICOM_DENMARK in include/linux/pci_ids.h) and from
Intel's OPAE driver (intel-fpga-pci), not read from the driver, so a
wrong or missing id in the driver fails here. The trees are built per
the kernel's DFL ABI (Documentation/ABI/testing/sysfs-platform-dfl-*).
"""

import os
import re

from oslo_config import cfg
import pytest

from cyborg_drivers import discovery
from cyborg_drivers.fpga import intel as intel_fpga
from cyborg_drivers.fpga import regions as fpga_regions
from cyborg_drivers import loader
from cyborg_drivers import sysfs

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
INTERFACE = '9346116d-a52d-5ca8-b06a-a9a389ef7c8d'
AFU = 'd8424dc4-a4a3-c413-f89e-433683f9040b'
IFACE_TRAIT = 'CUSTOM_FPGA_REGION_INTEL_9346116DA52D5CA8B06AA9A389EF7C8D'
AFU_TRAIT = 'CUSTOM_FPGA_FUNCTION_ID_INTEL_D8424DC4A4A3C413F89E433683F9040B'
PF = '0000:5e:00.0'

# dfl-pci's table: (vendor, device, subsystem or None for any), the
# product it is reported as, its VF id as the table lists it (None: the
# table has none), whether it is an OFS id (several PFs, the port stays
# on PF0).
KERNEL_PFS = [
    (0x8086, 0xbcbd, None, 'BDX_MCP', 0xbcbf, False),
    (0x8086, 0xbcc0, None, 'SKX_P', 0xbcc1, False),
    (0x8086, 0x09c4, None, 'PAC_ARRIA10', 0x09c5, False),
    (0x8086, 0x0b30, None, 'PAC_N3000', None, False),
    (0x8086, 0x0b2b, None, 'PAC_D5005', 0x0b2c, False),
    (0x1c2c, 0x1000, None, 'SILICOM_N5010', None, False),
    (0x1c2c, 0x1001, None, 'SILICOM_N5011', None, False),
    (0x8086, 0xbcce, (0x8086, 0x138d), 'PAC_D5005', None, True),
    (0x8086, 0xbcce, (0x8086, 0x1770), 'N6000', 0xbccf, True),
    (0x8086, 0xbcce, (0x8086, 0x1771), 'N6001', 0xbccf, True),
    (0x8086, 0xbcce, (0x8086, 0x17d4), 'C6100', 0xbccf, True),
]
KERNEL_IDS = (
    {(v, d, sub) for v, d, sub, *_ in KERNEL_PFS}
    | {(v, vf, sub) for v, _, sub, _, vf, _ in KERNEL_PFS if vf})
# intel-fpga-pci's PF and VF ids, all Intel's, any subsystem.
OPAE_IDS = {0xbcbd, 0xbcbf, 0xbcc0, 0xbcc1, 0x09c4, 0x09c5, 0x0b2b,
            0x0b2c, 0x0b30, 0x0b31}


def discover(root, names=('intel_fpga',)):
    conf = cfg.ConfigOpts()
    conf([])
    return discovery.Discoverer(loader.load(conf, list(names)),
                                root).discover()


def function(vendor, device, subsystem=None, driver=None):
    sub_vendor, sub_device = subsystem or (vendor, 0)
    return sysfs.PciFunction(PF, vendor, device, 0x120000, sub_vendor,
                             sub_device, driver, '/nonexistent')


def card(vendor, device, subsystem, *, driver='dfl-pci', fpga=None,
         sriov=None, address=PF, numa_node=1):
    sub_vendor, sub_device = subsystem or (vendor, 0)
    dev = {'address': address, 'vendor': vendor, 'device': device,
           'class': 0x120000, 'subsystem_vendor': sub_vendor,
           'subsystem_device': sub_device, 'numa_node': numa_node,
           'driver': driver}
    if fpga is not None:
        dev['fpga'] = fpga
    if sriov is not None:
        dev['sriov'] = sriov
    return dev


def test_the_id_table_is_the_kernels_and_opaes():
    table = fpga_regions.INTEL_FPGA_IDS.values()
    dfl = set()
    for known in table:
        if fpga_regions.DFL_DRIVER not in known.drivers:
            continue
        for sub, _ in known.subsystems or ((None, None),):
            dfl.add((known.vendor, known.device, sub))
    assert dfl == KERNEL_IDS
    assert {(k.vendor, k.device) for k in table
            if fpga_regions.OPAE_DRIVER in k.drivers} == {
        (0x8086, d) for d in OPAE_IDS}
    # Every product has a name for people, and only those.
    products = ({k.product for k in table if k.product}
                | {p for k in table for _, p in k.subsystems}
                | {fpga_regions.OFS_PRODUCT})
    assert products == set(fpga_regions.INTEL_PRODUCT_NAMES)


@pytest.mark.parametrize('vendor, device, subsystem, product, vf, ofs',
                         KERNEL_PFS)
def test_each_kernel_product_is_discovered(host_tree, vendor, device,
                                           subsystem, product, vf, ofs):
    fpga = {'layout': 'dfl', 'role': 'ofs-fme' if ofs else 'pac',
            'interface_id': INTERFACE, 'afu_id': AFU}
    root = host_tree({'name': 'one-fpga', 'devices': [
        {'address': '0000:00:00.0', 'vendor': 0x8086, 'device': 0x2020,
         'class': 0x060000, 'numa_node': 0},
        card(vendor, device, subsystem, fpga=fpga)]})
    result = discover(root)
    assert result.problems == {}
    (acc,) = result.accelerators
    assert (acc.address, acc.resource_class, acc.device_type, acc.numa_node,
            acc.units, acc.kernel_driver, acc.setup_required) == (
        PF, 'FPGA', 'FPGA', 1, (PF,), 'dfl-pci', False)
    assert set(acc.traits) == {'CUSTOM_FPGA_INTEL',
                               'CUSTOM_FPGA_INTEL_' + product,
                               IFACE_TRAIT, AFU_TRAIT}
    assert acc.product_id == '%04x' % device


@pytest.mark.parametrize('vendor, device, subsystem, product, vf, ofs',
                         [p for p in KERNEL_PFS if p[4]])
def test_each_kernel_product_with_vfs(host_tree, vendor, device, subsystem,
                                      product, vf, ofs):
    # Two VFs bound to dfl-pci: the units. A PAC's VF takes the PF's
    # port (the kernel wants one released port per VF, so one VF); an
    # OFS PF keeps its port and each VF has its own.
    numvfs = 2 if ofs else 1
    fpga = {'layout': 'dfl', 'role': 'ofs-fme' if ofs else 'pac',
            'interface_id': INTERFACE, 'afu_id': AFU}
    root = host_tree({'name': 'fpga-vfs', 'devices': [card(
        vendor, device, subsystem, fpga=fpga,
        sriov={'totalvfs': 3, 'numvfs': numvfs, 'vf_device': vf,
               'vf_driver': 'dfl-pci'})]})
    result = discover(root)
    assert result.problems == {}
    (acc,) = result.accelerators
    assert acc.units == ('0000:5e:00.1', '0000:5e:00.2')[:numvfs]
    assert acc.numa_node == 1
    assert 'CUSTOM_FPGA_INTEL_' + product in acc.traits
    assert IFACE_TRAIT in acc.traits and AFU_TRAIT in acc.traits
    # Where the AFU id was read: on the PF for OFS, on the VF for a PAC.
    by_layout = {r.function_id is not None: r for r in acc.fpga_regions}
    port_region = by_layout[True].name
    pf_regions = os.listdir(os.path.join(root, 'bus', 'pci', 'devices', PF,
                                         'fpga_region'))
    assert (port_region in pf_regions) is ofs


@pytest.mark.parametrize('vendor, device, subsystem', sorted(
    KERNEL_IDS, key=lambda i: (i[0], i[1], i[2] or (0, 0))))
def test_every_kernel_id_is_claimed_and_not_another_vendors(
        vendor, device, subsystem):
    driver = intel_fpga.IntelFpgaDriver(cfg.ConfigOpts())
    assert driver.claims(function(vendor, device, subsystem))
    other = 0x10ee if vendor != 0x10ee else 0x8086
    assert not driver.claims(function(other, device, subsystem))


@pytest.mark.parametrize('device', sorted(OPAE_IDS))
def test_every_opae_id_is_claimed(device):
    driver = intel_fpga.IntelFpgaDriver(cfg.ConfigOpts())
    assert driver.claims(function(0x8086, device, driver='intel-fpga-pci'))


@pytest.mark.parametrize('vendor, device, subsystem', [
    # The ids next to the known ones.
    (0x8086, 0x09c3, None), (0x8086, 0x09c6, None), (0x8086, 0x0b2a, None),
    (0x8086, 0x0b2d, None), (0x8086, 0xbcbc, None), (0x8086, 0xbcc2, None),
    # Silicom's N5013/N5014 and capture cards: dfl-pci does not bind them.
    (0x1c2c, 0x1002, None), (0x1c2c, 0x1003, None), (0x1c2c, 0x00a0, None),
    # OFS ids with subsystems the kernel does not bind: the D5005's VF, a
    # board of another subsystem, another subsystem vendor.
    (0x8086, 0xbccf, (0x8086, 0x138d)), (0x8086, 0xbcce, (0x8086, 0x0000)),
    (0x8086, 0xbcce, (0x1c2c, 0x1771)), (0x8086, 0xbccf, (0x8086, 0x0001)),
])
def test_other_ids_not_claimed(vendor, device, subsystem):
    driver = intel_fpga.IntelFpgaDriver(cfg.ConfigOpts())
    assert not driver.claims(function(vendor, device, subsystem))
    assert not driver.claims(function(vendor, device, subsystem,
                                      driver='vfio-pci'))


def test_ofs_board_of_another_subsystem_bound_by_hand(host_tree):
    # dfl-pci was bound to it anyway (new_id, driver_override): claimed,
    # as a generic OFS board.
    ofs = card(0x8086, 0xbcce, (0x8086, 0x0000), fpga={
        'layout': 'dfl', 'role': 'ofs-fme', 'interface_id': INTERFACE,
        'afu_id': AFU})
    unbound = card(0x8086, 0xbcce, (0x8086, 0x0000), driver='vfio-pci',
                   address='0000:af:00.0')
    result = discover(host_tree({'name': 'ofs-dev', 'devices': [
        ofs, unbound]}))
    (acc,) = result.accelerators
    assert acc.address == PF
    assert 'CUSTOM_FPGA_INTEL_OFS' in acc.traits


@pytest.mark.parametrize('device, product', [
    (0xbcbd, 'BDX_MCP'), (0xbcc0, 'SKX_P'), (0x09c4, 'PAC_ARRIA10'),
    (0x0b2b, 'PAC_D5005'), (0x0b30, 'PAC_N3000')])
def test_opae_pfs_are_discovered(host_tree, device, product):
    root = host_tree({'name': 'opae', 'devices': [card(
        0x8086, device, None, driver='intel-fpga-pci', fpga={
            'layout': 'opae', 'interface_id': INTERFACE, 'afu_id': AFU})]})
    (acc,) = discover(root).accelerators
    assert set(acc.traits) == {'CUSTOM_FPGA_INTEL',
                               'CUSTOM_FPGA_INTEL_' + product,
                               IFACE_TRAIT, AFU_TRAIT}
    assert acc.fpga_regions[0].layout == 'opae'


@pytest.mark.parametrize('device', [0x09c5, 0xbccf])
def test_a_vf_without_its_pf_is_a_problem_not_a_card(host_tree, device):
    # What a guest given the VF sees: the VF id, no physfn link.
    root = host_tree({'name': 'guest', 'devices': [card(
        0x8086, device, (0x8086, 0x1771), driver=None,
        address='0000:00:05.0')]})
    result = discover(root)
    assert result.accelerators == ()
    assert ('Intel FPGA VF 8086:%04x without its PF' % device
            in result.problems['0000:00:05.0'])
    # The privileged helper agrees: no card to program there.
    assert fpga_regions.find_card(root, '0000:00:05.0') is None


# -- the shipped OFS host ----------------------------------------------------

def test_ofs_fpga_host(host_tree):
    # With the default drivers: nothing but the Intel FPGAs is found.
    result = discover(host_tree('ofs-fpga-host'), (
        'nvidia_gpu', 'intel_fpga', 'xilinx_fpga', 'intel_qat'))
    assert result.problems == {}
    found = {a.address: (a.resource_class, a.numa_node, a.units,
                         [t for t in a.traits
                          if t.startswith('CUSTOM_FPGA_INTEL')])
             for a in result.accelerators}
    n6001 = ['CUSTOM_FPGA_INTEL', 'CUSTOM_FPGA_INTEL_N6001']
    assert found == {
        # PF0 with its 3 VFs; the other PFs each their own card (PF3 is
        # a virtio function, and no FPGA).
        '0000:3b:00.0': ('FPGA', 0, ('0000:3b:00.5', '0000:3b:00.6',
                                     '0000:3b:00.7'), n6001),
        '0000:3b:00.1': ('FPGA', 0, ('0000:3b:00.1',), n6001),
        '0000:3b:00.2': ('FPGA', 0, ('0000:3b:00.2',), n6001),
        '0000:3b:00.4': ('FPGA', 0, ('0000:3b:00.4',), n6001),
        '0000:5e:00.0': ('FPGA', 0, ('0000:5e:00.1',),
                         ['CUSTOM_FPGA_INTEL',
                          'CUSTOM_FPGA_INTEL_PAC_ARRIA10']),
        '0000:86:00.0': ('FPGA', 1, ('0000:86:00.0',),
                         ['CUSTOM_FPGA_INTEL',
                          'CUSTOM_FPGA_INTEL_SILICOM_N5010']),
        # The D5005's VFs are on vfio-pci, not claimed, still its units.
        '0000:d8:00.0': ('FPGA', 1, ('0000:d8:00.1', '0000:d8:00.2'),
                         ['CUSTOM_FPGA_INTEL',
                          'CUSTOM_FPGA_INTEL_PAC_D5005']),
    }
    by = {a.address: a for a in result.accelerators}
    # PF0's port stays: its AFU and the FIM's interface; PF2 has a port
    # and no FME; the PAC's AFU is read on its VF.
    assert ('CUSTOM_FPGA_REGION_INTEL_4514EE67CA015DEF9FA5A1EF30D0C76C'
            in by['0000:3b:00.0'].traits)
    assert ('CUSTOM_FPGA_FUNCTION_ID_INTEL_56E203E9864F49A7B94B12284C31E02B'
            in by['0000:3b:00.2'].traits)
    assert not any(t.startswith('CUSTOM_FPGA_REGION_')
                   for t in by['0000:3b:00.2'].traits)
    assert AFU_TRAIT in by['0000:5e:00.0'].traits
    assert IFACE_TRAIT in by['0000:5e:00.0'].traits


def test_find_card_agrees_on_the_ofs_host(host_tree):
    root = host_tree('ofs-fpga-host')
    found = discover(root).by_address()
    devices = os.listdir(os.path.join(root, 'bus', 'pci', 'devices'))
    cards = 0
    for address in devices:
        card_ = fpga_regions.find_card(root, address)
        acc = found.get(address)
        if acc is None:
            assert card_ is None, address
            continue
        cards += 1
        assert card_ == fpga_regions.FpgaCard(
            address, fpga_regions.INTEL, acc.fpga_regions,
            acc.sriov.num_vfs if acc.sriov else 0), address
    assert cards == 7


def test_ofs_port_errors_are_health(host_tree):
    conf = cfg.ConfigOpts()
    conf([])
    (driver,) = loader.load(conf, ['intel_fpga'])
    root = host_tree({'name': 'ofs', 'devices': [card(
        0x8086, 0xbcce, (0x8086, 0x1771), fpga={
            'layout': 'dfl', 'role': 'ofs-fme', 'interface_id': INTERFACE,
            'afu_id': AFU, 'port_errors': 0x8},
        sriov={'totalvfs': 3, 'numvfs': 1, 'vf_device': 0xbccf,
               'vf_driver': 'dfl-pci', 'offset': 5})]})
    snapshot = sysfs.PciSnapshot(root)
    (acc,) = driver.discover(snapshot)
    (reason,) = driver.health(acc, snapshot)
    assert reason.startswith('FPGA port of %s reports errors 0x8' % PF)
    vf = os.path.join(root, 'bus', 'pci', 'devices', '0000:5e:00.5')
    (region,) = os.listdir(os.path.join(vf, 'fpga_region'))
    (port,) = [n for n in os.listdir(os.path.join(vf, 'fpga_region',
                                                  region))
               if n.startswith('dfl-port.')]
    with open(os.path.join(vf, 'fpga_region', region, port, 'errors',
                           'errors'), 'w') as f:
        f.write('0x1\n')
    reasons = driver.health(acc, sysfs.PciSnapshot(root))
    assert len(reasons) == 2
    assert reasons[1].startswith('FPGA port of 0000:5e:00.5 reports '
                                 'errors 0x1')


# -- the documentation -------------------------------------------------------

def fpga_doc_rows():
    with open(os.path.join(REPO, 'doc', 'source', 'admin',
                           'device-ids.rst')) as f:
        text = f.read()
    section = text[text.index('.. _device-ids-fpga:'):]
    section = section[:section.index('.. _device-ids-', 1)]
    rows = []
    for row in section.split('   * - ')[1:]:
        cells = [c.strip() for c in row.split('\n     - ')]
        rows.append(cells)
    return rows[1:]


ID = re.compile(r'``([0-9a-f]{4}):([0-9a-f]{4})``')


def test_the_fpga_doc_lists_every_id_and_its_traits():
    intel, xilinx = set(), set()
    for cells in fpga_doc_rows():
        ids = ID.findall(cells[0])
        if not ids:
            continue  # the header row of the second table
        ((vendor, device),) = ids
        vendor, device = int(vendor, 16), int(device, 16)
        if vendor == fpga_regions.VENDOR_XILINX:
            xilinx.add(device)
            continue
        known = fpga_regions.INTEL_FPGA_IDS[(vendor, device)]
        if 'any other' in cells[1]:
            # The OFS fallback: an id named by subsystem, bound by hand.
            assert known.subsystems
            assert '``CUSTOM_FPGA_INTEL_%s``' % (
                fpga_regions.OFS_PRODUCT) in cells[-1]
            continue
        subs = [(int(v, 16), int(d, 16)) for v, d in ID.findall(cells[1])]
        products = dict(known.subsystems)
        for sub in subs or [None]:
            intel.add((vendor, device, sub))
            product = products.get(sub, known.product)
            if known.role == fpga_regions.PF:
                assert '``CUSTOM_FPGA_INTEL_%s``' % product in cells[-1], (
                    cells)
            else:
                assert 'unit of its PF' in cells[-1], cells
        for driver in known.drivers:
            assert '``%s``' % driver in cells[3], cells
    expected = set()
    for known in fpga_regions.INTEL_FPGA_IDS.values():
        for sub, _ in known.subsystems or ((None, None),):
            expected.add((known.vendor, known.device, sub))
    assert intel == expected
    assert xilinx == (set(fpga_regions.ALVEO_MGMT_PRODUCTS)
                      | set(fpga_regions.ALVEO_USER_PRODUCTS))
