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

import os

import os_traits
from oslo_config import cfg

from cyborg_drivers import base
from cyborg_drivers import device as device_model
from cyborg_drivers import names
from cyborg_drivers import sysfs

VENDOR_INTEL = 0x8086
VENDOR_MELLANOX = 0x15b3
VENDORS = (VENDOR_INTEL, VENDOR_MELLANOX)
ETHERNET_SUBCLASS = 0x0200
INFINIBAND_SUBCLASS = 0x0207
OTHER_NETWORK_SUBCLASS = 0x0280
#: PCI class (base class and subclass) -> the vendors whose PFs of that
#: class are claimed. ConnectX VPI cards show their PFs as InfiniBand or
#: "other network" controllers rather than Ethernet ones, depending on
#: how their ports are configured, and mlx5_core drives them all. Intel's
#: "other network" controllers are Wi-Fi adapters, never SR-IOV NICs.
CLASSES = {
    ETHERNET_SUBCLASS: (VENDOR_INTEL, VENDOR_MELLANOX),
    INFINIBAND_SUBCLASS: (VENDOR_MELLANOX,),
    OTHER_NETWORK_SUBCLASS: (VENDOR_MELLANOX,),
}
_CLAIMED = 'Intel Ethernet or Mellanox Ethernet, InfiniBand or VPI PF'


#: The scrub step that resets a freed VF's settings on its PF.
SCRUB_VF_SETTINGS = 'vf_settings'


class VfOps:
    """The privileged VF writes, through :mod:`privsep.net`.

    Tests put an object with the same methods in its place.
    """

    def reset_vf_settings(self, address: str) -> dict[str, str]:
        """:func:`privsep.net.reset_vf_settings`."""
        # Imported here: loading the driver starts no privsep daemon.
        import privsep.net
        return privsep.net.reset_vf_settings(address)


class NicSriovDriver(base.AcceleratorDriver):
    """Reports each configured SR-IOV NIC PF as one ``CUSTOM_NIC`` device.

    Its units are its enabled VFs. Traits, as upstream Cyborg's Intel NIC
    driver names them: ``CUSTOM_VF``, ``CUSTOM_<PHYSNET>`` from
    ``physical_device_mappings`` and ``CUSTOM_<FUNCTION>`` from
    ``function_device_mappings``; plus the standard ``HW_NIC_SRIOV``.
    """

    name = 'nic_sriov'
    description = 'SR-IOV NIC VFs of configured PFs (Intel, Mellanox, IB/VPI)'
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

    def check_options(self) -> list[base.ConfigProblem]:
        """Each mapping is ``<name>:<device>``; functions' PFs are mapped."""
        problems = []
        mapped = {}
        for option in ('physical_device_mappings',
                       'function_device_mappings'):
            try:
                mapped[option] = _mappings(getattr(self.options, option),
                                           option)
            except base.DriverError as exc:
                problems.append(base.ConfigProblem(option, str(exc)))
        physical = {d for d, _ in mapped.get('physical_device_mappings',
                                             ())}
        for device, function in mapped.get('function_device_mappings', ()):
            if physical and device not in physical:
                problems.append(base.ConfigProblem(
                    'function_device_mappings',
                    '%s:%s: %s is not in physical_device_mappings, so it '
                    'is not reported and the function is not offered'
                    % (function, device, device), warning=True))
        return problems

    #: A freed VF's settings on its PF first (they survive a reset of the
    #: VF), then the reset itself.
    SCRUB_STEPS = (SCRUB_VF_SETTINGS, base.SCRUB_FLR)

    @classmethod
    def unit_ops(cls) -> 'VfOps':
        """The VF settings reset (:mod:`privsep.net`)."""
        return VfOps()

    def scrub(self, sysfs_root: str, accelerator: device_model.Accelerator,
              unit: str, step: str, ops: object | None = None) -> str:
        """Scrub step ``vf_settings``, or ``flr`` as every family.

        ``vf_settings`` puts the VF's MAC, VLAN, QoS, spoof checking,
        trust, rate limits and link state on its PF back to the kernel's
        defaults.
        """
        if step != SCRUB_VF_SETTINGS:
            return super().scrub(sysfs_root, accelerator, unit, step, ops)
        done = (ops or VfOps()).reset_vf_settings(unit)
        return 'settings of VF %s on its PF: %s' % (unit, ', '.join(
            '%s %s' % kv for kv in sorted(done.items())))

    def offered(self, accelerator: device_model.Accelerator) -> list[str]:
        """The physical network its VFs reach, where one is mapped."""
        physnet = dict(accelerator.capabilities).get('physical_network')
        return ['network %s' % physnet] if physnet else []

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
                                 'physical_device_mappings but %s'
                                 % (self.group_name(),
                                    _not_found(snapshot, device)))
        return found


def _is_nic(function: sysfs.PciFunction) -> bool:
    return function.vendor in CLASSES.get(function.subclass, ())


def _describe(function: sysfs.PciFunction) -> str:
    return '%s:%s, class %s, driver %s' % (
        function.vendor_id, function.product_id, function.class_hex,
        function.driver or 'none')


def _not_found(snapshot: sysfs.PciSnapshot, device: str) -> str:
    """Why no reported PF has the name or address ``device``."""
    if device_model.is_pci_address(device):
        address = device
    else:
        # An interface of some other device: say which one it is.
        link = os.path.join(snapshot.root, 'class', 'net', device, 'device')
        address = (os.path.basename(os.path.realpath(link))
                   if os.path.exists(link) else None)
        if address is None or not device_model.is_pci_address(address):
            return ('no Intel or Mellanox NIC PF (an %s) has that name '
                    'or address' % _CLAIMED)
    function = snapshot.lookup(address)
    if function is None:
        return 'there is no PCI function %s on this host' % address
    physfn = snapshot.physfn(address)
    if address != device:
        what = 'interface %s is of %s (%s), which is' % (
            device, address, _describe(function))
    else:
        what = '%s (%s) is' % (address, _describe(function))
    if physfn:
        return '%s an SR-IOV VF (of %s), not a PF: name its PF' % (
            what, physfn)
    return '%s not an %s' % (what, _CLAIMED)


def _mappings(entries: list[str], option: str) -> list[tuple[str, str]]:
    """``['physnet1:ens1f0']`` -> ``[('ens1f0', 'physnet1')]``."""
    result = []
    for entry in entries:
        name, sep, device = entry.partition(':')
        if not sep or not name or not device:
            raise base.DriverError(
                '[cyborg_nic_sriov] %s: %r is not <name>:<device> (e.g. '
                'physnet1:ens1f0, or physnet1:0000:5e:00.0)'
                % (option, entry))
        result.append((device.strip(), name.strip()))
    return result
