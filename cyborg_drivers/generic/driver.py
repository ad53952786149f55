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

"""The generic driver: operator-described PCI devices.

The reference driver of the generic-driver spec and the model for vendor
drivers: it knows no hardware itself. Operators describe devices with
matchers in ``[cyborg_generic] device_spec``, in the JSON style of Nova's
``[pci] device_spec``, each mapped to a resource class and traits.
"""

from __future__ import annotations

import fnmatch
import json

from oslo_config import cfg

from cyborg_drivers import base
from cyborg_drivers import device as device_model
from cyborg_drivers.generic import nvme
from cyborg_drivers import names
from cyborg_drivers import sysfs

_KEYS = {'vendor_id', 'product_id', 'class', 'address', 'resource_class',
         'traits', 'device_type', 'units'}


class Matcher:
    """One ``device_spec`` entry, validated."""

    def __init__(self, spec: dict, text: str) -> None:
        unknown = set(spec) - _KEYS
        if unknown:
            raise ValueError('unknown key(s) %s; known: %s'
                             % (', '.join(sorted(unknown)),
                                ', '.join(sorted(_KEYS))))
        self.vendor = _hex_field(spec, 'vendor_id', 4)
        self.product = _hex_field(spec, 'product_id', 4)
        self.class_prefix = _class_prefix(spec.get('class'))
        self.address = spec.get('address')
        if not (self.vendor or self.product or self.class_prefix
                or self.address):
            raise ValueError('matches every device: give at least one of '
                             'vendor_id, product_id, class, address')
        self.resource_class = names.custom_resource_class(
            spec.get('resource_class', names.RC_PCI))
        traits = spec.get('traits', [])
        if not isinstance(traits, list):
            raise ValueError('traits must be a list')
        self.traits = tuple(names.custom_trait(str(t)) for t in traits)
        self.device_type = spec.get('device_type', 'GENERIC')
        if self.device_type not in device_model.DEVICE_TYPES:
            raise ValueError('device_type must be one of %s'
                             % ', '.join(device_model.DEVICE_TYPES))
        self.units = spec.get('units', 'auto')
        if self.units not in ('auto', 'device', 'vfs'):
            raise ValueError('units must be auto, device or vfs')

    def matches(self, function: sysfs.PciFunction) -> bool:
        return ((self.vendor is None or function.vendor == self.vendor)
                and (self.product is None
                     or function.device == self.product)
                and (self.class_prefix is None
                     or ('%06x' % function.class_code).startswith(
                         self.class_prefix))
                and (self.address is None
                     or fnmatch.fnmatchcase(function.address, self.address)))


def _hex_field(spec: dict, key: str, digits: int) -> int | None:
    value = spec.get(key)
    if value is None:
        return None
    text = str(value).lower().removeprefix('0x')
    if not text or len(text) > digits:
        raise ValueError('%s must be up to %d hex digits' % (key, digits))
    try:
        return int(text, 16)
    except ValueError:
        raise ValueError('%s must be hexadecimal, not %r' % (key, value))


def _class_prefix(value) -> str | None:
    """'0x12' / '1200' / '0x120000' -> a prefix of the 6-digit class."""
    if value is None:
        return None
    text = str(value).lower().removeprefix('0x')
    try:
        int(text, 16)
    except ValueError:
        raise ValueError('class must be hexadecimal, not %r' % value)
    if len(text) % 2 or len(text) > 6:
        raise ValueError('class must be 2, 4 or 6 hex digits (base class, '
                         'subclass, programming interface)')
    return text


class GenericDriver(nvme.NvmeFormatScrub, base.AcceleratorDriver):
    """Reports the PCI functions the operator's matchers select.

    Each matching PF is one accelerator. Its units are its enabled VFs
    (``"units": "auto"`` with SR-IOV on, or ``"vfs"``) or the function
    itself. Traits: the matcher's, plus ``CUSTOM_PCI_PRODUCT_ID_<PID>``
    (upstream Cyborg's PCI driver name). The first matching entry wins.
    A freed NVMe VF has its namespaces erased (scrub step
    ``nvme_format``) before it is reset.
    """

    name = 'generic'
    description = 'Operator-described PCI devices ([cyborg_generic])'
    needs_config = True
    CONFIG_OPTS = [
        cfg.MultiStrOpt(
            'device_spec',
            default=[],
            help="""
A device to report, as a JSON object; repeat the option for more.

Keys: ``vendor_id``, ``product_id`` (hex), ``class`` (hex prefix of the
class code: ``12`` for all processing accelerators, ``1200``, or all six
digits), ``address`` (glob, e.g. ``0000:3b:*``) select functions; at least
one is required. ``resource_class`` (default ``CUSTOM_PCI``), ``traits``
(list; names without ``CUSTOM_`` are prefixed), ``device_type`` (``GPU``,
``FPGA``, ``CRYPTO``, ``NIC`` or ``GENERIC``) and ``units`` (``auto``,
``device`` or ``vfs``) describe what is reported. Example::

    device_spec = {"vendor_id": "1d0f", "product_id": "efa1",
                   "resource_class": "CUSTOM_EFA", "traits": ["EFA_V1"]}

Related options:

* ``[cyborg_nova] enabled_drivers`` must contain ``generic``.
* A device listed here must not also be in Nova's ``[pci] device_spec``.
"""),
    ]

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        super().__init__(conf)
        self.matchers = []
        for text in self.options.device_spec:
            try:
                spec = json.loads(text)
                if not isinstance(spec, dict):
                    raise ValueError('not a JSON object')
                self.matchers.append(Matcher(spec, text))
            except ValueError as exc:
                raise base.DriverError(
                    '[cyborg_generic] device_spec %s: %s' % (text, exc))

    def is_configured(self) -> bool:
        return bool(self.matchers)

    def claims(self, function: sysfs.PciFunction) -> bool:
        return self._matcher(function) is not None

    def discover(self, snapshot: sysfs.PciSnapshot
                 ) -> list[device_model.Accelerator]:
        found = []
        for function in self.physical_functions(snapshot):
            matcher = self._matcher(function)
            address = function.address
            sriov, vfs = self.vf_units(snapshot, address)
            if matcher.units == 'device' or (matcher.units == 'auto'
                                             and not vfs):
                units = (address,)
            else:
                units = vfs
            traits = matcher.traits + (
                names.custom('PCI_PRODUCT_ID', function.product_id.upper()),)
            found.append(self.accelerator(
                snapshot, function,
                device_type=matcher.device_type,
                resource_class=matcher.resource_class,
                traits=traits,
                total=len(units),
                units=units,
                sriov=sriov,
                setup_required=not units))
        return found

    def _matcher(self, function: sysfs.PciFunction) -> Matcher | None:
        return next((m for m in self.matchers if m.matches(function)), None)
