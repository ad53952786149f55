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

"""Hot-plugging accelerators into instances: the names callers import.

The work is :mod:`cyborg_nova.hotplug`: the attach and detach flow
(:mod:`~cyborg_nova.hotplug.flow`), the instance's allocations
(:mod:`~cyborg_nova.hotplug.allocations`) and its libvirt domain
(:mod:`~cyborg_nova.hotplug.guest`). This module keeps the names the
commands and tests have always imported from ``cyborg_nova.attach``; the
tunables (poll intervals, conflict retries) are read where they are
defined, so set them there.
"""

from cyborg_nova.hotplug.allocations import Allocations  # noqa: F401
from cyborg_nova.hotplug.allocations import change_allocations  # noqa: F401
from cyborg_nova.hotplug.allocations import read_allocations  # noqa: F401
from cyborg_nova.hotplug.errors import AttachError  # noqa: F401
from cyborg_nova.hotplug.flow import attach  # noqa: F401
from cyborg_nova.hotplug.flow import check_attachable  # noqa: F401
from cyborg_nova.hotplug.flow import detach  # noqa: F401
from cyborg_nova.hotplug.flow import find_accelerator  # noqa: F401
from cyborg_nova.hotplug.flow import Result  # noqa: F401
from cyborg_nova.hotplug.flow import server_uuid  # noqa: F401
from cyborg_nova.hotplug.guest import DEFAULT_TIMEOUT  # noqa: F401
from cyborg_nova.hotplug.guest import DEFAULT_URI  # noqa: F401
from cyborg_nova.hotplug.guest import DeviceStrategy  # noqa: F401
from cyborg_nova.hotplug.guest import LibvirtGuest  # noqa: F401
from cyborg_nova.hotplug.guest import open_guest  # noqa: F401
from cyborg_nova.hotplug.guest import PciHostdev  # noqa: F401
from cyborg_nova.hotplug.guest import PrivsepGuest  # noqa: F401
from cyborg_nova.hotplug.guest import RemovalWait  # noqa: F401
from cyborg_nova.hotplug.guest import wait_gone  # noqa: F401
