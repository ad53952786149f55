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


"""The host's state store: one SQLite file in WAL mode, and its schema.

nova-compute (the virt driver extension), the agent and the
``cyborg-nova`` command on one host share it (``[cyborg_nova]
state_path``). This package is the only code that connects to it: it
owns the schema, its migrations and every SQL statement run against it;
the rest of the project calls its table API.

* :mod:`.database`: opening the store (the file created 0600, WAL mode,
  the schema migrated; or read-only, creating and migrating nothing),
  who owns what it creates, one connection per operation, and
  :meth:`~.database.Database.keep_open`;
* :mod:`.migrations`: the numbered schema steps, recorded in ``PRAGMA
  user_version`` (why not alembic: there, and in
  ``doc/source/contributor/layers.rst``);
* :mod:`.devices`: :class:`StateStore`, what callers open: device
  states, the device each update cycle reported, installed drivers and
  VF counts;
* :mod:`.units`: which PCI functions serve which Placement allocation
  (``StateStore.units``; the rules are :mod:`cyborg_nova.assignments`);
* :mod:`.jobs`: the programming journal's jobs and steps
  (``StateStore.jobs``; the rules are
  :mod:`cyborg_nova.programming.journal`);
* :mod:`.health`: each PCI function's PCIe AER counts and each device's
  AER effect (``StateStore.aer``; the rules are
  :mod:`cyborg_nova.health`).

The conductor-lite's own database (:mod:`cyborg_nova.conductor.db`, on
oslo.db) is another matter, not this store.
"""

from cyborg_nova.store.database import exists
from cyborg_nova.store.database import StoreMissing
from cyborg_nova.store.database import StoreOwnerError
from cyborg_nova.store.database import StorePermissionError
from cyborg_nova.store.database import StoreReadOnly
from cyborg_nova.store.devices import DeviceState
from cyborg_nova.store.devices import FAILED
from cyborg_nova.store.devices import HELD
from cyborg_nova.store.devices import identity_of
from cyborg_nova.store.devices import INACTIVE
from cyborg_nova.store.devices import InvalidState
from cyborg_nova.store.devices import PROGRAMMING
from cyborg_nova.store.devices import READY
from cyborg_nova.store.devices import STATES
from cyborg_nova.store.devices import StateStore
from cyborg_nova.store.devices import UNHEALTHY
from cyborg_nova.store.migrations import StoreTooNew
from cyborg_nova.store.migrations import StoreTooOld

__all__ = [
    'DeviceState',
    'exists',
    'FAILED',
    'HELD',
    'identity_of',
    'INACTIVE',
    'InvalidState',
    'PROGRAMMING',
    'READY',
    'STATES',
    'StateStore',
    'StoreMissing',
    'StoreOwnerError',
    'StorePermissionError',
    'StoreReadOnly',
    'StoreTooNew',
    'StoreTooOld',
    'UNHEALTHY',
]
