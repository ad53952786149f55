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

"""Privileged QAT operations: the services a QAT device is configured for.

The kernel's 4xxx, 420xx and 6xxx drivers take the services in
``qat/cfg_services`` of the PF, and only while the device is down
(``qat/state``); see Documentation/ABI/testing/sysfs-driver-qat. The
caller names the PF by address and the services by name; the device must
be one of those QAT PFs, bound to its driver, and down, and the services
must be ones its generation accepts, or nothing is written.
"""

from __future__ import annotations

import os

from cyborg_drivers.qat import products as qat_products
import privsep
from privsep import _common


def _product(dev_dir: str, address: str) -> qat_products.Product:
    """The QAT product at ``dev_dir``, if it has configurable services.

    :raises InvalidArgument: not a QAT PF, or one whose kernel has no
        ``qat/cfg_services`` (QAT generations before 4xxx).
    """
    ids = []
    for name in ('vendor', 'device'):
        text = _common.read_attr(os.path.join(dev_dir, name)) or ''
        try:
            ids.append(int(text, 16))
        except ValueError:
            ids.append(None)
    vendor, device = ids
    product = (qat_products.PRODUCTS.get(device)
               if vendor == qat_products.VENDOR_INTEL else None)
    if product is None:
        raise privsep.InvalidArgument(
            '%s is not a QAT physical function (vendor %s, device %s)'
            % (address, _hex(vendor), _hex(device)))
    if not product.services:
        raise privsep.InvalidArgument(
            '%s is a QAT %s: its kernel driver (%s) has no configurable '
            'services (qat/cfg_services is offered by the 4xxx, 420xx and '
            '6xxx drivers only)' % (address, product.name, product.pf_driver))
    return product


def _hex(value: int | None) -> str:
    return 'unreadable' if value is None else '%04x' % value


@privsep.sysfs_admin.entrypoint
def set_services(address: str, services: str) -> str:
    """Configure the QAT PF at ``address`` for ``services`` (``sym;dc``).

    The device must be down; it comes up with these services when it is
    brought up again (``qat/state``, or enabling its VFs).

    :returns: the services written, in the kernel's order
        (``sym;asym`` is written as ``asym;sym``).
    :raises InvalidArgument: (or a subclass) a bad or unknown address, a
        function that is not a QAT 4xxx, 420xx or 6xxx PF bound to its
        driver, services that device does not accept; nothing was written.
    :raises NotPossible: the device is not down; nothing was written.
    """
    return _set_services(_common.sysfs_root(), address, services)


def _set_services(sysfs_root: str, address: str, services: str) -> str:
    dev = _common.device_dir(sysfs_root, address)
    product = _product(dev, address)
    _common.reject_path_like('services', services)
    try:
        value = qat_products.parse_services(product, services)
    except ValueError as exc:
        raise privsep.InvalidArgument(str(exc))
    cfg_services = _common.require_attr(
        os.path.join(dev, 'qat', 'cfg_services'),
        '%s has no qat/cfg_services: its kernel driver %s is not bound, '
        'or the kernel is older than 6.0' % (address, product.pf_driver))
    state_attr = _common.require_attr(
        os.path.join(dev, 'qat', 'state'),
        '%s has no qat/state' % address)
    state = _common.read_attr(state_attr)
    if state != 'down':
        raise privsep.NotPossible(
            'QAT device %s is %s (qat/state): the kernel changes its '
            'services only while it is down' % (address, state))

    _common.write_attr(cfg_services, value)
    return value
