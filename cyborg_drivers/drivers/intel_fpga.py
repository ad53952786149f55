"""Intel PAC FPGA cards, through the OPAE driver or the kernel's DFL."""

from __future__ import annotations

from cyborg_drivers import base
from cyborg_drivers import device as device_model
from cyborg_drivers import names
from cyborg_drivers import sysfs

VENDOR_INTEL = 0x8086
# Product names as upstream Cyborg spells them in
# CUSTOM_FPGA_INTEL_<PRODUCT> (it knows only the Arria 10).
PRODUCTS = {
    0x09c4: 'PAC_ARRIA10',
    0x0b30: 'PAC_N3000',
    0x0b2b: 'PAC_D5005',
}


class IntelFpgaDriver(base.AcceleratorDriver):
    """Reports each Intel PAC as one ``FPGA`` accelerator.

    Traits (upstream Cyborg's names): ``CUSTOM_FPGA_INTEL``,
    ``CUSTOM_FPGA_INTEL_<PRODUCT>``, ``CUSTOM_FPGA_REGION_INTEL_<interface
    id>`` and ``CUSTOM_FPGA_FUNCTION_ID_INTEL_<afu id>``. With SR-IOV on
    (the OPAE driver moves the port to the VF) the units are the VFs.
    """

    name = 'intel_fpga'
    description = 'Intel PAC FPGAs (Arria 10, N3000, D5005): OPAE or DFL'

    def claims(self, function: sysfs.PciFunction) -> bool:
        return _is_pac(function)

    def discover(self, snapshot: sysfs.PciSnapshot
                 ) -> list[device_model.Accelerator]:
        return [self._card(snapshot, function)
                for function in self.physical_functions(snapshot)]

    def _card(self, snapshot: sysfs.PciSnapshot,
              function: sysfs.PciFunction) -> device_model.Accelerator:
        address = function.address
        sriov, vfs = self.vf_units(snapshot, address)
        regions = (_opae_regions(snapshot, address)
                   + _dfl_regions(snapshot, address))
        if vfs and not any(r.function_id for r in regions):
            # With SR-IOV on, the port (and its AFU id) moves to the VF.
            for vf in vfs:
                regions += (_opae_regions(snapshot, vf)
                            + _dfl_regions(snapshot, vf))
        traits = [names.TRAIT_FPGA_INTEL,
                  names.custom('FPGA_INTEL', PRODUCTS[function.device])]
        for region in regions:
            if region.interface_id:
                traits.append(names.custom(
                    'FPGA_REGION_INTEL', names.hex_id(region.interface_id)))
            if region.function_id:
                traits.append(names.custom(
                    'FPGA_FUNCTION_ID_INTEL',
                    names.hex_id(region.function_id)))
        problems = ()
        if not regions:
            problems = ('no FPGA management interface in sysfs (is '
                        'intel-fpga-pci or dfl-pci bound?)',)
        return self.accelerator(
            snapshot, function,
            device_type='FPGA',
            resource_class=names.RC_FPGA,
            traits=tuple(traits),
            total=len(vfs) or 1,
            units=vfs or (address,),
            sriov=sriov,
            fpga_regions=tuple(regions),
            setup_required=not regions,
            problems=problems)

    def health(self, accelerator: device_model.Accelerator,
               snapshot: sysfs.PciSnapshot) -> list[str]:
        """A port (the PF's, or a VF's with SR-IOV on) with errors set.

        Both drivers expose a port's error bits as hex in
        ``<port>/errors/errors``; anything but zero means the AFU or the
        port hit an error and the card needs attention (the kernel keeps
        the bits until they are cleared through ``errors/clear``).
        """
        reasons = []
        for address in accelerator.addresses:
            for parts in _ports(snapshot, address):
                path = '/'.join(parts + ('errors', 'errors'))
                value = snapshot.attr(address, *parts, 'errors', 'errors')
                if value is None:
                    # Drivers without error reporting: nothing to tell.
                    continue
                try:
                    errors = int(value, 16)
                except ValueError:
                    reasons.append('FPGA port errors of %s unreadable: %s '
                                   'is %r, not a hex number'
                                   % (address, path, value))
                    continue
                if errors:
                    reasons.append('FPGA port of %s reports errors %#x (%s);'
                                   ' clear them once the cause is fixed'
                                   % (address, errors, path))
        return reasons

    def program(self, accelerator: device_model.Accelerator,
                region: str, bitstream: str) -> None:
        """Load GBS ``bitstream`` into ``region`` with OPAE's fpgaconf.

        Runs in the ``sysfs_admin`` privsep daemon
        (:func:`privsep.fpga.program`), which resolves the bitstream's
        name under its own directory and checks the GBS's interface id
        against the card again before loading it.

        :raises base.DriverError: no such region, the port is on a VF, or
            the load was refused or failed.
        """
        _check_region(accelerator, region)
        if accelerator.sriov and accelerator.sriov.num_vfs:
            raise base.DriverError(
                'the FPGA port of %s is assigned to its VF (%d VFs): '
                'disable SR-IOV before programming'
                % (accelerator.address, accelerator.sriov.num_vfs))
        privileged_program(accelerator.address, bitstream)


def _check_region(accelerator: device_model.Accelerator,
                  region: str) -> None:
    names = [r.name for r in accelerator.fpga_regions]
    if region not in names:
        raise base.DriverError('%s has no FPGA region %r (regions: %s)'
                               % (accelerator.address, region,
                                  ', '.join(names) or 'none'))


def privileged_program(address: str, bitstream: str) -> str | None:
    """:func:`privsep.fpga.program`, its refusals as DriverError."""
    import privsep
    import privsep.fpga
    try:
        return privsep.fpga.program(address, bitstream)
    except (privsep.InvalidArgument, privsep.NotPossible) as exc:
        raise base.DriverError(str(exc))


def _ports(snapshot: sysfs.PciSnapshot, address: str
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


def _is_pac(function: sysfs.PciFunction) -> bool:
    return function.vendor == VENDOR_INTEL and function.device in PRODUCTS


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
