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

"""AMD/Xilinx Alveo cards: management and user functions as one device."""

from __future__ import annotations

import dataclasses

from cyborg_drivers import base
from cyborg_drivers import device as device_model
from cyborg_drivers.fpga import intel as intel_fpga
from cyborg_drivers.fpga import regions as fpga_regions
from cyborg_drivers.fpga import scrub as fpga_scrub
from cyborg_drivers import names
from cyborg_drivers import sysfs

VENDOR_XILINX = fpga_regions.VENDOR_XILINX
MGMT_PRODUCTS = fpga_regions.ALVEO_MGMT_PRODUCTS
USER_PRODUCTS = fpga_regions.ALVEO_USER_PRODUCTS
MGMT_DRIVER = fpga_regions.ALVEO_MGMT_DRIVER
USER_DRIVER = fpga_regions.ALVEO_USER_DRIVER
MGMT, USER = fpga_regions.MGMT, fpga_regions.USER
_role = fpga_regions.alveo_role


class XilinxFpgaDriver(fpga_scrub.DefaultBitstreamScrub,
                       base.AcceleratorDriver):
    """Reports each Alveo card as one ``FPGA`` accelerator.

    An Alveo exposes a management function (``xclmgmt``, even device id,
    function 0) and a user function (``xocl``, the next device id) in one
    slot. They are one card, keyed by the management function's address,
    which does not change whichever functions are visible. The user
    function is the unit, what a guest gets; the management function is
    what is programmed and is never a unit. With no user function visible
    the card has no units (``setup_required``).

    Claimed: functions with a known Alveo management or user device id
    (U200, U250, U280, U50, U55C), whatever driver they are bound to (a
    user function assigned to a guest is bound to ``vfio-pci``), and any
    Xilinx function bound to ``xclmgmt`` or ``xocl``.

    Traits: ``CUSTOM_FPGA_XILINX`` and ``CUSTOM_FPGA_PRODUCT_ID_<user
    pid>`` (upstream Cyborg's), plus ``CUSTOM_FPGA_REGION_XILINX_<interface
    uuid>`` and ``CUSTOM_FPGA_FUNCTION_ID_XILINX_<logic uuid>`` read from
    the management function's ``interface_uuids`` / ``logic_uuids``.
    """

    name = 'xilinx_fpga'
    CONFIG_OPTS = list(fpga_scrub.OPTS)
    description = 'AMD/Xilinx Alveo FPGAs (10ee), mgmt + user function'

    def offered(self, accelerator: device_model.Accelerator) -> list[str]:
        """The functions loaded in its regions."""
        return fpga_regions.offered(accelerator)

    def claims(self, function: sysfs.PciFunction) -> bool:
        return _role(function) is not None

    def discover(self, snapshot: sysfs.PciSnapshot
                 ) -> list[device_model.Accelerator]:
        slots: dict[str, list[sysfs.PciFunction]] = {}
        for function in self.physical_functions(snapshot):
            slot = function.address.rpartition('.')[0]
            slots.setdefault(slot, []).append(function)
        return [self._card(snapshot, slot, functions)
                for slot, functions in sorted(slots.items())]

    def _card(self, snapshot: sysfs.PciSnapshot, slot: str,
              functions: list[sysfs.PciFunction]
              ) -> device_model.Accelerator:
        functions.sort(key=lambda f: f.address)
        users = [f for f in functions if _role(f) == USER]
        mgmt = fpga_regions.alveo_management(functions)
        problems = []
        if mgmt is not None:
            address = mgmt.address
            user_pid = (users[0].product_id if users
                        else '%04x' % (mgmt.device + 1))
            interface = fpga_regions.alveo_uuids(snapshot, address,
                                                 'interface_uuids')
            logic = fpga_regions.alveo_uuids(snapshot, address,
                                             'logic_uuids')
        else:
            # The management function is function 0 of the slot: the card
            # keeps its address while that function is away.
            address = slot + '.0'
            user_pid = users[0].product_id
            interface = logic = []
            problems.append('management function %sis not visible: the '
                            'card cannot be managed or programmed'
                            % ('' if address == users[0].address
                               else address + ' '))
        if not users:
            problems.append('no user function visible, only the management '
                            'function %s, which is never handed to a '
                            'guest; is the user function (xocl) hidden or '
                            'removed?' % address)
        traits = [names.TRAIT_FPGA_XILINX,
                  names.custom('FPGA_PRODUCT_ID', user_pid.upper())]
        traits += [names.custom('FPGA_REGION_XILINX', names.hex_id(i))
                   for i in interface[:1]]
        traits += [names.custom('FPGA_FUNCTION_ID_XILINX', names.hex_id(i))
                   for i in logic[:1]]
        region = fpga_regions.alveo_region(interface, logic)
        accelerator = self.accelerator(
            snapshot, mgmt or users[0],
            device_type='FPGA',
            resource_class=names.RC_FPGA,
            traits=tuple(traits),
            # One card, one unit: every user function goes to the guest
            # that gets the card.
            total=1 if users else 0,
            functions=tuple(f.address for f in functions),
            units=tuple(f.address for f in users),
            fpga_regions=(region,),
            capabilities=(('management_function', address),),
            setup_required=not users,
            problems=tuple(problems))
        if mgmt is None and address != users[0].address:
            # Keyed by the absent management function: its identity, not
            # the user function's, so the card stays the same card.
            user_id = users[0].device
            accelerator = dataclasses.replace(
                accelerator, address=address,
                product_id='%04x' % (user_id - 1 if user_id in USER_PRODUCTS
                                     else user_id),
                iommu_group=None, kernel_driver=None)
        return accelerator

    def program(self, accelerator: device_model.Accelerator,
                region: str, bitstream: str) -> None:
        """Load xclbin ``bitstream`` through the management function.

        ``xbmgmt program --shell`` in the ``sysfs_admin`` privsep daemon
        (:func:`privsep.fpga.program`), which checks the xclbin's
        interface uuid against the card's ``interface_uuids`` first.

        :raises base.DriverError: no such region, no management function
            visible, or the load was refused or failed.
        """
        intel_fpga._check_region(accelerator, region)
        if accelerator.address not in accelerator.functions:
            raise base.DriverError('the management function %s of the '
                                   'card is not visible: it cannot be '
                                   'programmed' % accelerator.address)
        fpga_scrub.privileged_program(accelerator.address, bitstream)
