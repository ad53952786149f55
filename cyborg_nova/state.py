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


"""The host's accelerator state store, by its historical name.

Everything is in :mod:`cyborg_nova.store`; this module keeps the names
that callers import from here.
"""

from cyborg_nova.store import DeviceState  # noqa: F401
from cyborg_nova.store import FAILED  # noqa: F401
from cyborg_nova.store import HELD  # noqa: F401
from cyborg_nova.store import identity_of  # noqa: F401
from cyborg_nova.store import INACTIVE  # noqa: F401
from cyborg_nova.store import InvalidState  # noqa: F401
from cyborg_nova.store import PROGRAMMING  # noqa: F401
from cyborg_nova.store import READY  # noqa: F401
from cyborg_nova.store import STATES  # noqa: F401
from cyborg_nova.store import StateStore  # noqa: F401
from cyborg_nova.store import StoreTooNew  # noqa: F401
from cyborg_nova.store import UNHEALTHY  # noqa: F401
