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

"""Intel FPGA cards (PACs, OFS boards, integrated Xeon FPGAs, Silicom
SmartNICs), through the kernel's DFL driver or Intel's OPAE driver."""

from __future__ import annotations

from cyborg_drivers import base
from cyborg_drivers import device as device_model
from cyborg_drivers.fpga import regions as fpga_regions
from cyborg_drivers.fpga import scrub as fpga_scrub
from cyborg_drivers import names
from cyborg_drivers import sysfs

VENDOR_INTEL = fpga_regions.VENDOR_INTEL
#: (vendor, device) -> :class:`fpga_regions.IntelFpgaId`.
IDS = fpga_regions.INTEL_FPGA_IDS


class IntelFpgaDriver(fpga_scrub.DefaultBitstreamScrub,
                      base.AcceleratorDriver):
    """Reports each Intel FPGA PF as one ``FPGA`` accelerator.

    Every id the kernel's ``dfl-pci`` binds, and those of Intel's OPAE
    driver (:data:`IDS`). Traits (upstream Cyborg's names):
    ``CUSTOM_FPGA_INTEL``, ``CUSTOM_FPGA_INTEL_<PRODUCT>``,
    ``CUSTOM_FPGA_REGION_INTEL_<interface id>`` and
    ``CUSTOM_FPGA_FUNCTION_ID_INTEL_<afu id>``. With SR-IOV on the units
    are the VFs (a PAC's driver moves the port to the VF; an OFS board's
    VFs have ports of their own); otherwise the PF. An OFS board's other
    PFs are accelerators of their own.
    """

    name = 'intel_fpga'
    CONFIG_OPTS = list(fpga_scrub.OPTS)
    description = ('Intel FPGAs (PACs, OFS N6000/N6001/C6100/D5005, '
                   'integrated Xeon FPGAs, Silicom N5010/N5011): DFL or '
                   'OPAE')

    def offered(self, accelerator: device_model.Accelerator) -> list[str]:
        """The functions loaded in its regions."""
        return fpga_regions.offered(accelerator)

    def claims(self, function: sysfs.PciFunction) -> bool:
        return fpga_regions.is_intel_fpga(function)

    def discover(self, snapshot: sysfs.PciSnapshot
                 ) -> list[device_model.Accelerator]:
        cards = []
        for function in self.physical_functions(snapshot):
            known = fpga_regions.intel_fpga_id(function)
            if known.role == fpga_regions.VF:
                # A VF id with no physfn link: what a guest given the VF
                # sees. It is a unit of its PF, never a card of its own.
                snapshot.problem(function.address,
                                 'Intel FPGA VF %s:%s without its PF'
                                 % (function.vendor_id,
                                    function.product_id))
                continue
            cards.append(self._card(snapshot, function))
        return cards

    def _card(self, snapshot: sysfs.PciSnapshot,
              function: sysfs.PciFunction) -> device_model.Accelerator:
        address = function.address
        sriov, vfs = self.vf_units(snapshot, address)
        # With SR-IOV on, the port (and its AFU id) moves to the VF.
        regions = fpga_regions.intel_regions(snapshot, address, vfs)
        traits = [names.TRAIT_FPGA_INTEL,
                  names.custom('FPGA_INTEL',
                               fpga_regions.intel_product(function))]
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
            for parts in fpga_regions.intel_ports(snapshot, address):
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
        fpga_scrub.privileged_program(accelerator.address, bitstream)


def _check_region(accelerator: device_model.Accelerator,
                  region: str) -> None:
    names = [r.name for r in accelerator.fpga_regions]
    if region not in names:
        raise base.DriverError('%s has no FPGA region %r (regions: %s)'
                               % (accelerator.address, region,
                                  ', '.join(names) or 'none'))
