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

"""Intel QuickAssist (QAT) crypto and compression accelerators.

Discovery, health, and the one setting of QAT devices, their services
(``qat/cfg_services``); the product table is :mod:`.products`.
"""

from __future__ import annotations

import os

from cyborg_drivers import base
from cyborg_drivers import device as device_model
from cyborg_drivers import names
from cyborg_drivers.qat import products
from cyborg_drivers import sysfs

#: The setting ``driver-update --qat-services`` changes.
SERVICES_SETTING = 'services'


class IntelQatDriver(base.AcceleratorDriver):
    """Reports each QAT PF as one ``CUSTOM_QAT`` accelerator.

    Its units are its enabled VFs (what guests get); a PF with SR-IOV off
    has no units and is reported with ``setup_required``. Traits:
    ``CUSTOM_QAT`` (upstream Cyborg's) and, where the kernel exposes the
    configured services (``qat/cfg_services`` on 4xxx, 420xx and 6xxx),
    one ``CUSTOM_QAT_<SERVICE>`` per service (``SYM``, ``ASYM``,
    ``DC``...).
    """

    name = 'intel_qat'
    description = 'Intel QAT (C62x, 4xxx, 420xx, 6xxx...): PF, VFs as units'
    SETTINGS = (SERVICES_SETTING,)

    def offered(self, accelerator: device_model.Accelerator) -> list[str]:
        """The services it is configured for (``sym``, ``dc``...)."""
        value = self.read_setting(accelerator, SERVICES_SETTING)
        return value.split(';') if value else []

    def claims(self, function: sysfs.PciFunction) -> bool:
        return _is_qat(function)

    def discover(self, snapshot: sysfs.PciSnapshot
                 ) -> list[device_model.Accelerator]:
        found = []
        for function in self.physical_functions(snapshot):
            if function.device in products.PRODUCTS:
                found.append(self._pf(snapshot, function))
            else:
                # A VF id with no physfn link: a VF this host got from a
                # hypervisor; only a PF's VFs are units.
                snapshot.problem(function.address, 'QAT VF %s:%s without '
                                 'its PF on this host (given to it by a '
                                 'hypervisor?): only a PF is reported, with '
                                 'its VFs as units' % (function.vendor_id,
                                                       function.product_id))
        return found

    def _pf(self, snapshot: sysfs.PciSnapshot,
            function: sysfs.PciFunction) -> device_model.Accelerator:
        address = function.address
        sriov, vfs = self.vf_units(snapshot, address)
        services = _services(snapshot, address)
        traits = [names.TRAIT_QAT]
        traits += [names.custom('QAT', s) for s in services]
        capabilities = [('generation',
                         products.PRODUCTS[function.device].name)]
        if services:
            capabilities.append(('services', ';'.join(services)))
        return self.accelerator(
            snapshot, function,
            device_type='CRYPTO',
            resource_class=names.RC_QAT,
            traits=tuple(traits),
            total=len(vfs),
            units=vfs,
            sriov=sriov,
            capabilities=tuple(capabilities),
            setup_required=not vfs)

    def health(self, accelerator: device_model.Accelerator,
               snapshot: sysfs.PciSnapshot) -> list[str]:
        """``qat/state`` other than ``up``: the device is stopped or failed.

        Kernels before 6.0, and QAT generations before 4xxx, have no
        ``qat/state``; nothing is reported then.
        """
        state = snapshot.attr(accelerator.address, 'qat', 'state')
        if state is not None and state != 'up':
            return ['QAT device %s is %r, not up (qat/state): stopped or '
                    'failed; its VFs cannot be used until it is up again'
                    % (accelerator.address, state)]
        return []

    def has_setting(self, accelerator: device_model.Accelerator,
                    setting: str) -> bool:
        """Services, on the generations whose kernel offers them.

        Not the C62x and the others without ``qat/cfg_services``.
        """
        return (setting == SERVICES_SETTING
                and bool(product_of(accelerator).services))

    def read_setting(self, accelerator: device_model.Accelerator,
                     setting: str) -> str | None:
        if setting != SERVICES_SETTING:
            return None
        value = dict(accelerator.capabilities).get('services')
        return value.lower() if value else None

    def check_setting(self, sysfs_root: str,
                      accelerator: device_model.Accelerator, setting: str,
                      value: str) -> str:
        """The services as the kernel will write them, if taken now.

        :raises NotSupported: a setting other than services.
        :raises DriverError: the device does not take these services, or
            is not down (the kernel takes them only then); the message
            says how to bring it down and up again.
        """
        if setting != SERVICES_SETTING:
            return super().check_setting(sysfs_root, accelerator, setting,
                                         value)
        address = accelerator.address
        product = product_of(accelerator)
        try:
            written = products.parse_services(product, value)
        except ValueError as exc:
            raise base.DriverError('%s: %s; nothing was changed'
                                   % (address, exc))
        state = sysfs.PciSnapshot(sysfs_root, only=[address]).attr(
            address, 'qat', 'state')
        if state is None:
            raise base.DriverError(
                '%s has no qat/state: its kernel driver %s is not bound, or '
                'the kernel is older than 6.0; nothing was changed'
                % (address, product.pf_driver))
        if state != 'down':
            state_file = os.path.join(sysfs_root, 'bus', 'pci', 'devices',
                                      address, 'qat', 'state')
            raise base.DriverError(
                'QAT device %s is %s: the kernel changes its services only '
                'while it is down; nothing was changed. Stop it first (this '
                'removes its VFs, so no instance may be using it):\n'
                '    echo down > %s\n'
                'then run this command again, and bring it up with its '
                'VFs:\n'
                '    cyborg-nova driver-update %s --num-vfs %d '
                '--device %s\n'
                '(or "echo up > %s" to bring it up without VFs)'
                % (address, state, state_file, self.name,
                   accelerator.sriov.total_vfs if accelerator.sriov else 0,
                   address, state_file))
        return written

    def apply_setting(self, address: str, setting: str, value: str,
                      ops: object | None = None) -> str:
        """Write the services through :func:`privsep.qat.set_services`.

        :param ops: an object with ``set_services(address, services)``;
            :mod:`privsep.qat` itself when None.
        :raises NotSupported: a setting other than services.
        :raises privsep.InvalidArgument: (a ValueError) refused.
        :raises privsep.NotPossible: the device is not down.
        """
        if setting != SERVICES_SETTING:
            return super().apply_setting(address, setting, value, ops)
        if ops is None:
            import privsep.qat as ops
        return ops.set_services(address, value)


def product_of(accelerator: device_model.Accelerator
               ) -> products.Product:
    """The QAT product an accelerator of this driver is."""
    return products.PRODUCTS[int(accelerator.product_id, 16)]


def _is_qat(function: sysfs.PciFunction) -> bool:
    # VFs are claimed too, so one whose PF is not claimed is reported
    # rather than left for another driver; physical_functions() never
    # makes a VF an accelerator of its own.
    return function.vendor == products.VENDOR_INTEL and (
        function.device in products.PRODUCTS
        or function.device in products.VF_PRODUCTS)


def _services(snapshot: sysfs.PciSnapshot, address: str) -> list[str]:
    text = snapshot.attr(address, 'qat', 'cfg_services') or ''
    return sorted({s.strip().upper() for s in text.split(';') if s.strip()})
