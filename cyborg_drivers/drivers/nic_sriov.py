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

"""SR-IOV NIC virtual functions of the PFs an operator names."""

from __future__ import annotations

import os_traits
from oslo_config import cfg

from cyborg_drivers import base
from cyborg_drivers import device as device_model
from cyborg_drivers import names
from cyborg_drivers import sysfs

# Intel and Mellanox/NVIDIA Ethernet controllers.
VENDORS = (0x8086, 0x15b3)
ETHERNET_SUBCLASS = 0x0200


class NicSriovDriver(base.AcceleratorDriver):
    """Reports each configured SR-IOV NIC PF as one ``CUSTOM_NIC`` device.

    Its units are its enabled VFs. Traits, as upstream Cyborg's Intel NIC
    driver names them: ``CUSTOM_VF``, ``CUSTOM_<PHYSNET>`` from
    ``physical_device_mappings`` and ``CUSTOM_<FUNCTION>`` from
    ``function_device_mappings``; plus the standard ``HW_NIC_SRIOV``.
    """

    name = 'nic_sriov'
    description = 'SR-IOV NIC VFs (Intel, Mellanox) of configured PFs'
    needs_config = True
    CONFIG_OPTS = [
        cfg.ListOpt(
            'physical_device_mappings',
            default=[],
            help="""
PFs whose VFs are reported, each as ``<physnet>:<device>``.

``<device>`` is the PF's network interface name (``ens1f0``) or its PCI
address (``0000:5e:00.0``); the same format as the Neutron SR-IOV agent's
option of this name. Each PF gets the trait ``CUSTOM_<PHYSNET>``. Empty by
default: the driver reports nothing until PFs are listed.

Related options:

* ``function_device_mappings``
* ``[cyborg_nova] enabled_drivers`` must contain ``nic_sriov``.
"""),
        cfg.ListOpt(
            'function_device_mappings',
            default=[],
            help="""
Functions the VFs of a PF offer, each as ``<function>:<device>``.

Adds the trait ``CUSTOM_<FUNCTION>`` to the PF's provider, so flavors can
ask for e.g. ``trait:CUSTOM_IPSEC=required``. ``<device>`` as in
``physical_device_mappings``; the PF must be listed there too.
"""),
    ]

    def is_configured(self) -> bool:
        return bool(self.options.physical_device_mappings)

    def claims(self, function: sysfs.PciFunction) -> bool:
        return _is_nic(function)

    def discover(self, snapshot: sysfs.PciSnapshot
                 ) -> list[device_model.Accelerator]:
        physnets = _mappings(self.options.physical_device_mappings,
                             'physical_device_mappings')
        functions = _mappings(self.options.function_device_mappings,
                              'function_device_mappings')
        found = []
        seen = set()
        for function in self.physical_functions(snapshot):
            address = function.address
            keys = {address, *snapshot.listdir(address, 'net')}
            physnet = next((p for d, p in physnets if d in keys), None)
            if physnet is None:
                continue
            seen.update(keys)
            sriov, vfs = self.vf_units(snapshot, address)
            if sriov is None:
                snapshot.problem(address, 'configured in '
                                 'physical_device_mappings but not an '
                                 'SR-IOV capable PF')
                continue
            traits = [names.TRAIT_VF, names.custom(physnet),
                      os_traits.HW_NIC_SRIOV]
            traits += [names.custom(f) for d, f in functions if d in keys]
            found.append(self.accelerator(
                snapshot, function,
                device_type='NIC',
                resource_class=names.RC_NIC,
                traits=tuple(traits),
                total=len(vfs),
                units=vfs,
                sriov=sriov,
                capabilities=(('physical_network', physnet),),
                setup_required=not vfs))
        if not snapshot.is_full:
            # Only some functions were read (an event's re-discovery): the
            # configured PFs outside them are not missing.
            return found
        for device, _ in physnets:
            if device not in seen:
                snapshot.problem(device, 'named in [%s] '
                                 'physical_device_mappings but no Intel or '
                                 'Mellanox Ethernet PF has that name or '
                                 'address' % self.group_name())
        return found


def _is_nic(function: sysfs.PciFunction) -> bool:
    return (function.vendor in VENDORS
            and function.subclass == ETHERNET_SUBCLASS)


def _mappings(entries: list[str], option: str) -> list[tuple[str, str]]:
    """``['physnet1:ens1f0']`` -> ``[('ens1f0', 'physnet1')]``."""
    result = []
    for entry in entries:
        name, sep, device = entry.partition(':')
        if not sep or not name or not device:
            raise base.DriverError(
                '[cyborg_nic_sriov] %s: %r is not <name>:<device>'
                % (option, entry))
        result.append((device.strip(), name.strip()))
    return result
