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

"""FPGA cards in sysfs: which function is a card, its regions, what is loaded.

The knowledge the FPGA drivers report with
(:mod:`cyborg_drivers.fpga.intel`,
:mod:`cyborg_drivers.fpga.xilinx`) and the privileged helper
checks a bitstream against (:mod:`privsep.fpga`, through
:func:`find_card`), kept here so the helper never loads the drivers
(which call it):

- Intel FPGAs (OPAE ``intel-fpga-pci`` or the kernel's DFL ``dfl-pci``):
  one card per physical function; each region's PR interface id comes
  from the FME, the loaded AFU id from the port (on the PF, or on a VF
  once SR-IOV moved the port there). Open FPGA Stack (OFS) boards show
  several PFs, each its own card: PF0 with the FME and a port that stays
  there when VFs are enabled, the others with a port only;
- AMD/Xilinx Alveo: one card per slot, keyed by its management function
  (``xclmgmt``), whose ``interface_uuids`` and ``logic_uuids`` name the
  shell's interface and the loaded xclbin; the user function (``xocl``)
  is what a guest gets.
"""

from __future__ import annotations

import dataclasses
import os

from cyborg_drivers import device as device_model
from cyborg_drivers import sysfs

INTEL, XILINX = 'intel', 'xilinx'
#: What each family of card is called in messages.
FAMILY_NAMES = {INTEL: 'Intel PAC', XILINX: 'AMD/Xilinx Alveo'}

VENDOR_INTEL = 0x8086
#: PCI_VENDOR_ID_SILICOM_DENMARK, the N5010/N5011 SmartNICs' vendor.
VENDOR_SILICOM = 0x1c2c
#: The PCI drivers that give an Intel FPGA its management interface: the
#: kernel's DFL driver and Intel's out-of-tree OPAE driver.
DFL_DRIVER, OPAE_DRIVER = 'dfl-pci', 'intel-fpga-pci'
PF, VF = 'PF', 'VF'
#: The OFS device ids, which name a board only with its subsystem id.
OFS_PF_DEVICE, OFS_VF_DEVICE = 0xbcce, 0xbccf
#: Product of an OFS function whose subsystem id names no board the
#: kernel knows, when ``dfl-pci`` was bound to it all the same.
OFS_PRODUCT = 'OFS'


@dataclasses.dataclass(frozen=True)
class IntelFpgaId:
    """One Intel FPGA PCI id and what it is."""

    vendor: int
    device: int
    #: :data:`PF` or :data:`VF`.
    role: str
    #: Product, as upstream Cyborg spells it in CUSTOM_FPGA_INTEL_<PRODUCT>
    #: (it knows only PAC_ARRIA10; the others follow its style); None when
    #: the subsystem id tells the board (:attr:`subsystems`).
    product: str | None
    #: The PCI drivers whose id tables list it.
    drivers: tuple[str, ...]
    #: ``(subsystem vendor, subsystem device) -> product`` for ids shared
    #: by several boards (the kernel binds only these subsystems).
    subsystems: tuple[tuple[tuple[int, int], str], ...] = ()


def _intel_boards(boards: dict) -> tuple:
    """Subsystem devices (Intel's subsystem vendor) -> product."""
    return tuple(((VENDOR_INTEL, sub), product)
                 for sub, product in boards.items())


# drivers/fpga/dfl-pci.c's cci_pcie_id_tbl (all of it), and the ids of
# Intel's OPAE driver (intel-fpga-pci).
INTEL_FPGA_IDS = {(i.vendor, i.device): i for i in (
    # Xeon with an integrated FPGA: Broadwell-EP + Arria 10 multi-chip
    # package (PCIE_DEVICE_ID_PF_INT_5_X) and Xeon SKX-P (INT_6_X).
    IntelFpgaId(VENDOR_INTEL, 0xbcbd, PF, 'BDX_MCP',
                (DFL_DRIVER, OPAE_DRIVER)),
    IntelFpgaId(VENDOR_INTEL, 0xbcbf, VF, 'BDX_MCP',
                (DFL_DRIVER, OPAE_DRIVER)),
    IntelFpgaId(VENDOR_INTEL, 0xbcc0, PF, 'SKX_P',
                (DFL_DRIVER, OPAE_DRIVER)),
    IntelFpgaId(VENDOR_INTEL, 0xbcc1, VF, 'SKX_P',
                (DFL_DRIVER, OPAE_DRIVER)),
    # PAC with Arria 10 GX (PCIE_DEVICE_ID_PF_DSC_1_X).
    IntelFpgaId(VENDOR_INTEL, 0x09c4, PF, 'PAC_ARRIA10',
                (DFL_DRIVER, OPAE_DRIVER)),
    IntelFpgaId(VENDOR_INTEL, 0x09c5, VF, 'PAC_ARRIA10',
                (DFL_DRIVER, OPAE_DRIVER)),
    # PAC N3000: dfl-pci binds the PF only.
    IntelFpgaId(VENDOR_INTEL, 0x0b30, PF, 'PAC_N3000',
                (DFL_DRIVER, OPAE_DRIVER)),
    IntelFpgaId(VENDOR_INTEL, 0x0b31, VF, 'PAC_N3000', (OPAE_DRIVER,)),
    # PAC D5005 (Stratix 10 SX) on its original firmware.
    IntelFpgaId(VENDOR_INTEL, 0x0b2b, PF, 'PAC_D5005',
                (DFL_DRIVER, OPAE_DRIVER)),
    IntelFpgaId(VENDOR_INTEL, 0x0b2c, VF, 'PAC_D5005',
                (DFL_DRIVER, OPAE_DRIVER)),
    # Silicom FPGA SmartNICs (PCI_VENDOR_ID_SILICOM_DENMARK).
    IntelFpgaId(VENDOR_SILICOM, 0x1000, PF, 'SILICOM_N5010',
                (DFL_DRIVER,)),
    IntelFpgaId(VENDOR_SILICOM, 0x1001, PF, 'SILICOM_N5011',
                (DFL_DRIVER,)),
    # Open FPGA Stack boards (PCIE_DEVICE_ID_INTEL_DFL and its VF): the
    # subsystem id (PCIE_SUBDEVICE_ID_INTEL_*) tells the board; the
    # kernel has no VF entry for the D5005's.
    IntelFpgaId(VENDOR_INTEL, OFS_PF_DEVICE, PF, None, (DFL_DRIVER,),
                _intel_boards({0x138d: 'PAC_D5005', 0x1770: 'N6000',
                               0x1771: 'N6001', 0x17d4: 'C6100'})),
    IntelFpgaId(VENDOR_INTEL, OFS_VF_DEVICE, VF, None, (DFL_DRIVER,),
                _intel_boards({0x1770: 'N6000', 0x1771: 'N6001',
                               0x17d4: 'C6100'})),
)}

#: What each product is (for people: documentation and logs).
INTEL_PRODUCT_NAMES = {
    'BDX_MCP': 'Xeon E5 (Broadwell-EP) with an integrated Arria 10 FPGA',
    'SKX_P': 'Xeon Scalable (Skylake SKX-P) with an integrated Arria 10 '
             'FPGA',
    'PAC_ARRIA10': 'Programmable Acceleration Card with Arria 10 GX FPGA',
    'PAC_N3000': 'FPGA Programmable Acceleration Card N3000',
    'PAC_D5005': 'FPGA Programmable Acceleration Card D5005',
    'SILICOM_N5010': 'Silicom FPGA SmartNIC N5010',
    'SILICOM_N5011': 'Silicom FPGA SmartNIC N5011',
    'N6000': 'Acceleration Development Platform N6000',
    'N6001': 'Acceleration Development Platform N6001',
    'C6100': 'Acceleration Development Platform C6100',
    OFS_PRODUCT: 'Open FPGA Stack board of another subsystem id, bound to '
                 'dfl-pci by hand',
}

VENDOR_XILINX = 0x10ee
# Management function device id -> card. The user function's id is the
# management function's + 1. Other Xilinx functions (XDMA example
# designs, other boards' shells) are claimed only when bound to XRT's
# drivers, which know them.
ALVEO_MGMT_PRODUCTS = {
    0x5000: 'U200',
    0x5004: 'U250',
    0x500c: 'U280',
    0x5020: 'U50',
    0x505c: 'U55C',
}
ALVEO_USER_PRODUCTS = {pid + 1: card
                       for pid, card in ALVEO_MGMT_PRODUCTS.items()}
ALVEO_MGMT_DRIVER = 'xclmgmt'
ALVEO_USER_DRIVER = 'xocl'
MGMT, USER = 'management', 'user'


# -- Intel FPGAs --------------------------------------------------------------

def intel_fpga_id(function: sysfs.PciFunction) -> IntelFpgaId | None:
    """The id table entry of ``function``'s vendor and device, if any."""
    return INTEL_FPGA_IDS.get((function.vendor, function.device))


def intel_product(function: sysfs.PciFunction) -> str | None:
    """The product of an Intel FPGA function (PF or VF), None if not one.

    An OFS id names its board by subsystem id, and the kernel binds only
    the subsystems it knows: any other is claimed only when ``dfl-pci``
    was bound to it anyway (``new_id``, ``driver_override`` or a kernel
    that knows more boards), as :data:`OFS_PRODUCT`.
    """
    known = intel_fpga_id(function)
    if known is None:
        return None
    if not known.subsystems:
        return known.product
    product = dict(known.subsystems).get(
        (function.subsystem_vendor, function.subsystem_device))
    if product is None and function.driver == DFL_DRIVER:
        product = OFS_PRODUCT
    return product


def is_intel_fpga(function: sysfs.PciFunction) -> bool:
    """Whether ``function`` is an Intel FPGA (a PF or one of its VFs)."""
    return intel_product(function) is not None


def intel_regions(snapshot: sysfs.PciSnapshot, address: str,
                  vfs: tuple[str, ...] = ()) -> list[device_model.FpgaRegion]:
    """The regions of the Intel FPGA whose PF is ``address``.

    :param vfs: the PF's VFs: with SR-IOV on, the port (and its AFU id)
        moves to the VF, whose regions are read when the PF shows no
        loaded function.
    """
    regions = (_opae_regions(snapshot, address)
               + _dfl_regions(snapshot, address))
    if vfs and not any(r.function_id for r in regions):
        for vf in vfs:
            regions += (_opae_regions(snapshot, vf)
                        + _dfl_regions(snapshot, vf))
    return regions


def intel_ports(snapshot: sysfs.PciSnapshot, address: str
                ) -> list[tuple[str, ...]]:
    """Paths (below the function) of the FPGA ports of ``address``."""
    ports = []
    for dev in snapshot.listdir(address, 'fpga'):
        if dev.startswith('intel-fpga-dev.'):
            ports += [('fpga', dev, child)
                      for child in snapshot.listdir(address, 'fpga', dev)
                      if child.startswith('intel-fpga-port.')]
    for region in snapshot.listdir(address, 'fpga_region'):
        ports += [('fpga_region', region, child)
                  for child in snapshot.listdir(address, 'fpga_region',
                                                region)
                  if child.startswith('dfl-port.')]
    return ports


def _norm_id(value: str | None) -> str | None:
    if not value:
        return None
    value = value.replace('-', '').lower()
    return value if len(value) == 32 and _is_hex(value) else None


def _is_hex(value: str) -> bool:
    try:
        int(value, 16)
    except ValueError:
        return False
    return True


def _opae_regions(snapshot: sysfs.PciSnapshot, address: str
                  ) -> list[device_model.FpgaRegion]:
    """``<dev>/fpga/intel-fpga-dev.N/{intel-fpga-fme.N,intel-fpga-port.N}``.

    The FME (on the PF) holds the PR interface id, the port (on the PF,
    or on the VF once SR-IOV is on) the loaded AFU id.
    """
    regions = []
    for dev in snapshot.listdir(address, 'fpga'):
        if not dev.startswith('intel-fpga-dev.'):
            continue
        interface_id = function_id = None
        for child in snapshot.listdir(address, 'fpga', dev):
            if child.startswith('intel-fpga-fme.'):
                interface_id = _norm_id(snapshot.attr(
                    address, 'fpga', dev, child, 'pr', 'interface_id'))
            elif child.startswith('intel-fpga-port.'):
                function_id = _norm_id(snapshot.attr(
                    address, 'fpga', dev, child, 'afu_id'))
        regions.append(device_model.FpgaRegion(
            name=dev, interface_id=interface_id, function_id=function_id,
            layout='opae'))
    return regions


def _dfl_regions(snapshot: sysfs.PciSnapshot, address: str
                 ) -> list[device_model.FpgaRegion]:
    """``<dev>/fpga_region/regionN/{dfl-fme.N,dfl-port.N}`` (kernel DFL).

    The PR interface id is the ``compat_id`` of the FME's PR region
    (``dfl-fme.N/dfl-fme-region.M/fpga_region/regionK/compat_id``).
    """
    regions = []
    for region in snapshot.listdir(address, 'fpga_region'):
        base = ('fpga_region', region)
        interface_id = function_id = None
        for child in snapshot.listdir(address, *base):
            if child.startswith('dfl-fme.'):
                for pr in snapshot.listdir(address, *base, child):
                    if not pr.startswith('dfl-fme-region.'):
                        continue
                    for sub in snapshot.listdir(address, *base, child, pr,
                                                'fpga_region'):
                        interface_id = interface_id or _norm_id(
                            snapshot.attr(address, *base, child, pr,
                                          'fpga_region', sub, 'compat_id'))
            elif child.startswith('dfl-port.'):
                function_id = _norm_id(
                    snapshot.attr(address, *base, child, 'afu_id'))
        regions.append(device_model.FpgaRegion(
            name=region, interface_id=interface_id, function_id=function_id,
            layout='dfl'))
    return regions


# -- AMD/Xilinx Alveo -------------------------------------------------------

def alveo_role(function: sysfs.PciFunction) -> str | None:
    """Which function of an Alveo card ``function`` is, None if none."""
    if function.vendor != VENDOR_XILINX:
        return None
    if function.driver == ALVEO_MGMT_DRIVER:
        return MGMT
    if function.driver == ALVEO_USER_DRIVER:
        return USER
    if function.device in ALVEO_MGMT_PRODUCTS:
        return MGMT
    if function.device in ALVEO_USER_PRODUCTS:
        return USER
    return None


def alveo_management(functions: list[sysfs.PciFunction]
                     ) -> sysfs.PciFunction | None:
    """The management function of a card's ``functions`` (one slot's).

    The one bound to ``xclmgmt`` if any, else the first; None if none
    is visible.
    """
    mgmts = [f for f in functions if alveo_role(f) == MGMT]
    return next((f for f in mgmts if f.driver == ALVEO_MGMT_DRIVER),
                mgmts[0] if mgmts else None)


def alveo_uuids(snapshot: sysfs.PciSnapshot, address: str,
                name: str) -> list[str]:
    """The uuids of attribute ``name`` (``interface_uuids``...), as hex."""
    text = snapshot.attr(address, name) or ''
    return [line.strip().replace('-', '').lower()
            for line in text.splitlines() if line.strip()]


def alveo_region(interface: list[str],
                 logic: list[str]) -> device_model.FpgaRegion:
    """The card's one region, from its interface and logic uuids."""
    return device_model.FpgaRegion(
        name='0', interface_id=interface[0] if interface else None,
        function_id=logic[0] if logic else None, layout='xrt')


# -- the card at an address ---------------------------------------------------

@dataclasses.dataclass(frozen=True)
class FpgaCard:
    """A programmable FPGA card, as the FPGA drivers report it."""

    #: What is programmed: the Intel FPGA's PF, the Alveo's management
    #: function.
    address: str
    #: :data:`INTEL` or :data:`XILINX`.
    family: str
    regions: tuple[device_model.FpgaRegion, ...]
    #: VFs enabled on the PF (an Intel PAC's port moves to its VF).
    num_vfs: int = 0


def _claims(function: sysfs.PciFunction) -> bool:
    return is_intel_fpga(function) or alveo_role(function) is not None


def find_card(sysfs_root: str, address: str) -> FpgaCard | None:
    """The FPGA card whose address (as the drivers key it) is ``address``.

    Reads only the functions of ``address``'s slot. None if it is not
    an Intel FPGA's PF nor an Alveo's management function (or, with that
    function hidden, function 0 of an Alveo's slot).
    """
    slot = address.rpartition('.')[0]
    try:
        names = os.listdir(os.path.join(sysfs_root, 'bus', 'pci',
                                        'devices'))
    except OSError:
        names = [address]
    only = sorted({n for n in names if n.rpartition('.')[0] == slot}
                  | {address})
    snapshot = sysfs.PciSnapshot(sysfs_root, only, _claims)
    # As the drivers walk it: claimed functions, less SR-IOV VFs.
    functions = [f for f in snapshot
                 if _claims(f) and not snapshot.is_vf(f.address)]
    for function in functions:
        # (A VF id here has no physfn link: a guest's VF, no card.)
        if (function.address == address and is_intel_fpga(function)
                and intel_fpga_id(function).role == PF):
            sriov = snapshot.sriov(address)
            vfs = sriov.vf_addresses if sriov else ()
            return FpgaCard(address, INTEL,
                            tuple(intel_regions(snapshot, address, vfs)),
                            sriov.num_vfs if sriov else 0)
    alveo = sorted((f for f in functions
                    if alveo_role(f) is not None
                    and f.address.rpartition('.')[0] == slot),
                   key=lambda f: f.address)
    if not alveo:
        return None
    mgmt = alveo_management(alveo)
    if mgmt is None:
        # Keyed by the absent management function, function 0.
        if address != slot + '.0':
            return None
        return FpgaCard(address, XILINX, (alveo_region([], []),))
    if mgmt.address != address:
        return None
    return FpgaCard(address, XILINX, (alveo_region(
        alveo_uuids(snapshot, address, 'interface_uuids'),
        alveo_uuids(snapshot, address, 'logic_uuids')),))


def offered(accelerator: device_model.Accelerator) -> list[str]:
    """``function <id>`` of each region with a function loaded."""
    return ['function %s' % r.function_id
            for r in accelerator.fpga_regions if r.function_id]
