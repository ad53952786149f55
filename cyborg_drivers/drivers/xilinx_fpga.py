"""AMD/Xilinx Alveo cards: management and user functions as one device."""

from __future__ import annotations

from cyborg_drivers import base
from cyborg_drivers import device as device_model
from cyborg_drivers import names
from cyborg_drivers import sysfs

VENDOR_XILINX = 0x10ee
# Processing accelerators; some shells identify as a memory controller.
ALVEO_SUBCLASSES = (0x1200, 0x0580)
MGMT_DRIVER = 'xclmgmt'


class XilinxFpgaDriver(base.AcceleratorDriver):
    """Reports each Alveo card as one ``FPGA`` accelerator.

    An Alveo exposes a management function (``xclmgmt``, even device id,
    function 0) and a user function (``xocl``, the next device id) in one
    slot. They are one card: the user function is what a guest gets, the
    management function is what is programmed. Traits:
    ``CUSTOM_FPGA_XILINX`` and ``CUSTOM_FPGA_PRODUCT_ID_<user pid>``
    (upstream Cyborg's), plus ``CUSTOM_FPGA_REGION_XILINX_<interface
    uuid>`` and ``CUSTOM_FPGA_FUNCTION_ID_XILINX_<logic uuid>`` read from
    the management function's ``interface_uuids`` / ``logic_uuids``.
    """

    name = 'xilinx_fpga'
    description = 'AMD/Xilinx Alveo FPGAs (10ee), mgmt + user function'

    def claims(self, function: sysfs.PciFunction) -> bool:
        return _is_alveo(function)

    def discover(self, snapshot: sysfs.PciSnapshot
                 ) -> list[device_model.Accelerator]:
        slots: dict[str, list[sysfs.PciFunction]] = {}
        for function in self.physical_functions(snapshot):
            slot = function.address.rpartition('.')[0]
            slots.setdefault(slot, []).append(function)
        return [self._card(snapshot, functions)
                for _, functions in sorted(slots.items())]

    def _card(self, snapshot: sysfs.PciSnapshot,
              functions: list[sysfs.PciFunction]
              ) -> device_model.Accelerator:
        functions.sort(key=lambda f: f.address)
        mgmt = next((f for f in functions if f.driver == MGMT_DRIVER),
                    functions[0])
        user = next((f for f in functions if f is not mgmt), mgmt)
        interface = _uuids(snapshot, mgmt.address, 'interface_uuids')
        logic = _uuids(snapshot, mgmt.address, 'logic_uuids')
        traits = [names.TRAIT_FPGA_XILINX,
                  names.custom('FPGA_PRODUCT_ID', user.product_id.upper())]
        traits += [names.custom('FPGA_REGION_XILINX', names.hex_id(i))
                   for i in interface[:1]]
        traits += [names.custom('FPGA_FUNCTION_ID_XILINX', names.hex_id(i))
                   for i in logic[:1]]
        region = device_model.FpgaRegion(
            name='0', interface_id=interface[0] if interface else None,
            function_id=logic[0] if logic else None, layout='xrt')
        problems = ()
        if user is mgmt:
            problems = ('only one function of the card is visible',)
        return self.accelerator(
            snapshot, user,
            device_type='FPGA',
            resource_class=names.RC_FPGA,
            traits=tuple(traits),
            total=1,
            functions=tuple(f.address for f in functions),
            units=(user.address,),
            fpga_regions=(region,),
            capabilities=(('management_function', mgmt.address),),
            problems=problems)


def _is_alveo(function: sysfs.PciFunction) -> bool:
    return (function.vendor == VENDOR_XILINX
            and function.subclass in ALVEO_SUBCLASSES)


def _uuids(snapshot: sysfs.PciSnapshot, address: str,
           name: str) -> list[str]:
    text = snapshot.attr(address, name) or ''
    return [line.strip().replace('-', '').lower()
            for line in text.splitlines() if line.strip()]
