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

"""Resource class and trait names the drivers report.

Standard names come from ``os_resource_classes`` / ``os_traits``. Custom
names keep upstream OpenStack Cyborg's spelling wherever Cyborg has one,
so flavors written for Cyborg keep scheduling; ``doc/source/admin/names.rst``
lists every name and where it comes from.
"""

from __future__ import annotations

import os_resource_classes as orc
import os_traits

# Upstream Cyborg's custom resource classes (cyborg.common.constants).
RC_QAT = 'CUSTOM_QAT'
RC_NIC = 'CUSTOM_NIC'
RC_PCI = 'CUSTOM_PCI'
RC_FPGA = orc.FPGA
RC_PGPU = orc.PGPU
RC_VGPU = orc.VGPU

TRAIT_FPGA_INTEL = 'CUSTOM_FPGA_INTEL'
TRAIT_FPGA_XILINX = 'CUSTOM_FPGA_XILINX'
TRAIT_QAT = 'CUSTOM_QAT'
TRAIT_VF = 'CUSTOM_VF'


#: Placement's longest resource class or trait name.
NAME_MAX = 255


def custom(*parts: str) -> str:
    """``CUSTOM_`` + the parts joined by ``_``, normalised for Placement.

    Cut to :data:`NAME_MAX` characters: parts read from sysfs could make
    a longer name, which Placement would refuse, failing the whole
    host's update.

    >>> custom('FPGA', 'REGION', 'INTEL', 'ab-cd')
    'CUSTOM_FPGA_REGION_INTEL_AB_CD'
    """
    return os_traits.normalize_name(
        '_'.join(p for p in parts if p))[:NAME_MAX]


def custom_resource_class(name: str) -> str:
    """A resource class name as Placement accepts it.

    Standard names and names already carrying ``CUSTOM_`` pass through
    unchanged; anything else is normalised to ``CUSTOM_<NAME>``.
    """
    if name in orc.STANDARDS or name.startswith(orc.CUSTOM_NAMESPACE):
        return name
    return orc.normalize_name(name)[:NAME_MAX]


def custom_trait(name: str) -> str:
    """A trait name as Placement accepts it (see custom_resource_class)."""
    if os_traits.is_custom(name) or name in os_traits.get_traits():
        return name
    return os_traits.normalize_name(name)[:NAME_MAX]


def hex_id(value: str | None) -> str:
    """A uuid or id as upstream Cyborg puts it in traits: no dashes, upper.

    >>> hex_id('9346116d-a52d-5ca8-b06a-a9a389ef7c8d')
    '9346116DA52D5CA8B06AA9A389EF7C8D'
    """
    return (value or '').replace('-', '').strip().upper()
