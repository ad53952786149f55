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


"""Moved to :mod:`cyborg_drivers.nvidia.vgpu`; only what one caller uses.

:mod:`cyborg_nova.virt.guest` asks whether a PCI unit is a vendor-VFIO
vGPU VF through this name while it is rewritten to ask the unit's driver
(:func:`cyborg_nova.vgpus.managed`); remove this module with that call.
"""

from cyborg_drivers.nvidia import vgpu as _vgpu

is_vendor_vfio = _vgpu.is_vendor_vfio
