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

"""What the kernel's QAT drivers accept: products and their services.

Facts only, without the driver plugin, so the privileged helper
(:mod:`privsep.qat`) checks what it writes against the same table the
driver reports from.
"""

from __future__ import annotations

import dataclasses

VENDOR_INTEL = 0x8086

# What qat/cfg_services accepts, in the order the kernel writes them back
# (its enum adf_services, qat_common/adf_cfg_services.h).
SERVICES = ('asym', 'sym', 'dc', 'decomp', 'dcc')
_GEN4_SERVICES = ('asym', 'sym', 'dc', 'dcc')
# dcc (compression chaining) is the one service the kernel never combines.
_ALONE = 'dcc'


@dataclasses.dataclass(frozen=True)
class Product:
    """One QAT PF the upstream kernel binds, as its driver knows it.

    ``services`` is what the kernel accepts in ``qat/cfg_services`` of
    this product, empty when it has no ``qat/`` at all (only the
    ``4xxx``, ``420xx`` and ``6xxx`` drivers create it);
    ``max_services`` how many of them it combines.
    """

    name: str
    pf_driver: str
    vf_device: int
    # The upstream kernel's VF driver; None where it has none (GEN4 and
    # GEN6 VFs are only ever given to guests, through vfio-pci).
    vf_driver: str | None
    services: tuple[str, ...] = ()
    max_services: int = 0


# PF device id -> product: every id of the pci_device_id tables of
# drivers/crypto/intel/qat/qat_*/adf_drv.c, with the VF id and the driver
# name of adf_accel_devices.h / include/linux/pci_ids.h.
PRODUCTS = {
    0x0435: Product('DH895XCC', 'dh895xcc', 0x0443, 'dh895xccvf'),
    0x37c8: Product('C62X', 'c6xx', 0x37c9, 'c6xxvf'),
    0x19e2: Product('C3XXX', 'c3xxx', 0x19e3, 'c3xxxvf'),
    0x4940: Product('4XXX', '4xxx', 0x4941, None, _GEN4_SERVICES, 2),
    0x4942: Product('401XX', '4xxx', 0x4943, None, _GEN4_SERVICES, 2),
    0x4944: Product('402XX', '4xxx', 0x4945, None, _GEN4_SERVICES, 2),
    0x4946: Product('420XX', '420xx', 0x4947, None, _GEN4_SERVICES, 2),
    0x4948: Product('6XXX', '6xxx', 0x4949, None, SERVICES, 3),
}
#: VF device id -> the PF device id whose VFs carry it.
VF_PRODUCTS = {p.vf_device: pf for pf, p in PRODUCTS.items()}


def parse_services(product: Product, text: object) -> str:
    """``text`` as the kernel writes it back, if ``product`` accepts it.

    The rules of the kernel's ``cfg_services`` store: ``;``-separated
    service names, each at most once; 4xxx, 401xx, 402xx and 420xx accept
    ``asym``, ``sym``, ``dc`` and ``dcc``, up to two of them; 6xxx also
    ``decomp``, up to three; ``dcc`` only alone. The order does not
    matter (``sym;asym`` is ``asym;sym``): the result is in the kernel's
    order.

    :raises ValueError: ``text`` is not a string the kernel accepts for
        this product; the message says what it does accept.
    """
    if not product.services:
        raise ValueError(
            'a %s has no configurable services: the kernel offers '
            'qat/cfg_services only on 4xxx, 401xx, 402xx, 420xx and 6xxx '
            'devices' % product.name)
    allowed = ('%s (one of %s; up to %d combined, %s only alone)'
               % (product.name, ', '.join(product.services),
                  product.max_services, _ALONE))
    if not isinstance(text, str) or not text:
        raise ValueError('services %r are not services a %s accepts'
                         % (text, allowed))
    tokens = text.split(';')
    unknown = [t for t in tokens if t not in product.services]
    if unknown:
        raise ValueError('services %r: %s not accepted by a %s'
                         % (text, ', '.join(repr(t) for t in unknown),
                            allowed))
    if len(set(tokens)) != len(tokens):
        raise ValueError('services %r name a service twice' % text)
    if len(tokens) > product.max_services:
        raise ValueError('services %r: a %s combines at most %d services'
                         % (text, product.name, product.max_services))
    if _ALONE in tokens and len(tokens) > 1:
        raise ValueError('services %r: %s cannot be combined with another '
                         'service' % (text, _ALONE))
    return ';'.join(s for s in SERVICES if s in tokens)
