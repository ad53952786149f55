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

"""Nova's libvirt driver with accelerators (production computes)."""

from nova.virt.libvirt import driver

from cyborg_nova.virt import extension
from cyborg_nova.virt import guest
from cyborg_nova.virt import numa_filter


# The provider mixin first: its spawn programs the FPGAs before the
# guest mixin records the units and builds the guest.
class LibvirtDriver(extension.AcceleratorProviderMixin,
                    guest.GuestAcceleratorsMixin,
                    driver.LibvirtDriver):
    """``compute_driver = cyborg_nova.LibvirtDriver``."""

    def _get_host_numa_topology(self):
        topology = super()._get_host_numa_topology()
        if topology is not None:
            numa_filter.mark_cells(topology)
        return topology
