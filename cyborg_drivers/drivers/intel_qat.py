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

"""Intel QuickAssist (QAT) crypto and compression accelerators."""

from __future__ import annotations

from cyborg_drivers import base
from cyborg_drivers import device as device_model
from cyborg_drivers import names
from cyborg_drivers import sysfs

VENDOR_INTEL = 0x8086
# PF device id -> generation.
PRODUCTS = {
    0x0435: 'DH895XCC',
    0x37c8: 'C62X',
    0x19e2: 'C3XXX',
    0x4940: '4XXX',
    0x4942: '401XX',
    0x4944: '402XX',
}


class IntelQatDriver(base.AcceleratorDriver):
    """Reports each QAT PF as one ``CUSTOM_QAT`` accelerator.

    Its units are its enabled VFs (what guests get); a PF with SR-IOV off
    has no units and is reported with ``setup_required``. Traits:
    ``CUSTOM_QAT`` (upstream Cyborg's) and, where the kernel exposes the
    configured services (``qat/cfg_services`` on 4xxx), one
    ``CUSTOM_QAT_<SERVICE>`` per service (``SYM``, ``ASYM``, ``DC``...).
    """

    name = 'intel_qat'
    description = 'Intel QAT (C62x, 4xxx...): one device per PF, VFs as units'

    def claims(self, function: sysfs.PciFunction) -> bool:
        return _is_qat(function)

    def discover(self, snapshot: sysfs.PciSnapshot
                 ) -> list[device_model.Accelerator]:
        return [self._pf(snapshot, function)
                for function in self.physical_functions(snapshot)]

    def _pf(self, snapshot: sysfs.PciSnapshot,
            function: sysfs.PciFunction) -> device_model.Accelerator:
        address = function.address
        sriov, vfs = self.vf_units(snapshot, address)
        services = _services(snapshot, address)
        traits = [names.TRAIT_QAT]
        traits += [names.custom('QAT', s) for s in services]
        capabilities = [('generation', PRODUCTS[function.device])]
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

        Kernels before 6.5 have no ``qat/state``; nothing is reported then.
        """
        state = snapshot.attr(accelerator.address, 'qat', 'state')
        if state is not None and state != 'up':
            return ['QAT device %s is %r, not up (qat/state): stopped or '
                    'failed; its VFs cannot be used until it is up again'
                    % (accelerator.address, state)]
        return []


def _is_qat(function: sysfs.PciFunction) -> bool:
    return function.vendor == VENDOR_INTEL and function.device in PRODUCTS


def _services(snapshot: sysfs.PciSnapshot, address: str) -> list[str]:
    text = snapshot.attr(address, 'qat', 'cfg_services') or ''
    return sorted({s.strip().upper() for s in text.split(';') if s.strip()})
