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

"""Writing back, after a host reboot, the VF counts the operator set.

The kernel starts every SR-IOV PF with ``sriov_numvfs`` 0, so the VFs
``cyborg-nova driver-update --num-vfs`` enabled are gone after a reboot,
and with them the functions the unit store says serve instances. The
counts driver-update recorded in the host's state store are written back
here, before Nova resumes its guests. A PF that cannot get its count back
is fenced (state ``failed``, with the reason) so that Placement hands out
nothing of it until the operator has looked.

Whatever else a family must redo after a reboot is its driver's
:meth:`~cyborg_drivers.base.AcceleratorDriver.restore` hook, asked for
each of the driver's devices the store knows once the VF counts are
back; a device it cannot restore is fenced the same way. Units a guest
is given (vGPUs: a mediated device, a VF's vGPU type) need nothing
here: they are made again when the guest is given them, at its resume
or hard reboot (see :mod:`cyborg_nova.unit_work`).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Callable, Sequence

from cyborg_drivers import base
from cyborg_drivers import device as device_model
from cyborg_drivers import loader
from cyborg_drivers import sysfs
from cyborg_nova import providers
from cyborg_nova import store as state_store

LOG = logging.getLogger(__name__)

RESTORED = 'restored'
UNCHANGED = 'unchanged'
FENCED = 'fenced'
#: Not restored, and the store has no row of the device to fence.
FAILED = 'failed'

#: ``(address, count)``: the privileged write (``privsep.pci.set_num_vfs``).
SetNumVfs = Callable[[str, int], object]


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What :func:`restore_vfs` did to one PF."""

    address: str
    #: :data:`RESTORED`, :data:`UNCHANGED`, :data:`FENCED` or :data:`FAILED`.
    action: str
    #: The count driver-update recorded.
    recorded: int
    #: ``sriov_numvfs`` found before any write; None if unreadable.
    found: int | None
    #: Why it was fenced (what is also in the store row).
    reason: str | None = None


def restore_vfs(store: state_store.StateStore, nodename: str,
                sysfs_root: str, set_num_vfs: SetNumVfs,
                allocations_for: providers.AllocationLookup,
                drivers: Sequence[base.AcceleratorDriver] | None = None
                ) -> list[Outcome]:
    """Give every PF of ``nodename`` its recorded VF count back.

    PFs whose ``sriov_numvfs`` already has it are left alone. A PF that
    has VFs, only not that many, goes through 0 (as ``set_num_vfs`` does
    it) only while no instance holds it in Placement: otherwise it is
    fenced instead, since that would take VFs from under the guests.

    :param allocations_for: ``rp_uuid -> {consumer: ...} | None``; asked
        only for a PF that has VFs to lose (None: Placement cannot say,
        which fences the PF).
    :param drivers: the loaded drivers, whose :meth:`~cyborg_drivers.
        base.AcceleratorDriver.restore` is then asked for each of their
        devices in the store; by default the installed driver each
        device's row names, loaded without options.
    :returns: one outcome per recorded PF, by address, then one per
        device a driver could not restore.
    """
    outcomes = [_restore(store, nodename, sysfs_root, set_num_vfs,
                         allocations_for, address, count)
                for address, count in sorted(
                    store.vf_counts(nodename).items())]
    fenced = {o.address for o in outcomes if o.action in (FENCED, FAILED)}
    counts = store.vf_counts(nodename)
    for address, row in sorted(store.devices(nodename).items()):
        driver = loader.named(row.driver, drivers)
        if driver is None or address in fenced or row.missing:
            continue
        try:
            reasons = driver.restore(sysfs_root, address)
        except base.DriverError as exc:
            reasons = [str(exc)]
        if reasons:
            count = counts.get(address, 0)
            outcomes.append(_fence(
                store, nodename, address, count, None,
                '; '.join(reasons), prefix='not restored at start: '))
    return outcomes


def _sriov(sysfs_root: str, address: str
           ) -> tuple[device_model.SriovInfo | None, str]:
    """The PF's SR-IOV state as discovery reads it, or why there is none."""
    snapshot = sysfs.PciSnapshot(sysfs_root, only=[address])
    if not snapshot.exists(address):
        return None, 'the PF is not on the bus'
    info = snapshot.sriov(address)
    if info is None:
        return None, 'the PF shows no readable sriov_totalvfs'
    return info, ''


def _restore(store, nodename, sysfs_root, set_num_vfs, allocations_for,
             address, count) -> Outcome:
    info, missing = _sriov(sysfs_root, address)
    if info is None:
        return _fence(store, nodename, address, count, None,
                      'recorded %d VFs but %s' % (count, missing))
    found = info.num_vfs
    if found == count:
        return Outcome(address, UNCHANGED, count, found)
    shows = 'the kernel shows %d' % found
    if count > info.total_vfs:
        return _fence(store, nodename, address, count, found,
                      'recorded %d VFs but the PF offers only %d '
                      '(sriov_totalvfs); %s' % (count, info.total_vfs,
                                                shows))
    if found:
        consumers = allocations_for(
            providers.provider_uuid(nodename, address))
        if consumers is None or consumers:
            held = ('Placement cannot say whether instances hold it'
                    if consumers is None else 'instance(s) %s hold it'
                    % ', '.join(sorted(consumers)))
            return _fence(store, nodename, address, count, found,
                          'recorded %d VFs, %s; not changed: %s'
                          % (count, shows, held))
    try:
        set_num_vfs(address, count)
    except Exception as exc:
        return _fence(store, nodename, address, count, found,
                      'recorded %d VFs, %s; setting %d failed: %s'
                      % (count, shows, count, exc))
    # The kernel creates the VFs before the write returns: check that
    # they are there, as discovery will count them.
    after, missing = _sriov(sysfs_root, address)
    on_bus = len(after.vf_addresses) if after is not None else 0
    if after is None or after.num_vfs != count or on_bus != count:
        return _fence(store, nodename, address, count, found,
                      'recorded %d VFs, %s; after setting %d: %s'
                      % (count, shows, count, missing or
                         'sriov_numvfs %d, %d VFs on the bus'
                         % (after.num_vfs, on_bus)))
    LOG.info('VFs of %s on %s restored: %d -> %d', address, nodename,
             found, count)
    return Outcome(address, RESTORED, count, found)


def _fence(store, nodename, address, count, found, why,
           prefix='VFs not restored at start: ') -> Outcome:
    reason = prefix + why
    try:
        store.set_state(nodename, address, state_store.FAILED, reason)
    except KeyError:
        LOG.error('%s on %s: %s; the store has no such device to fence',
                  address, nodename, reason)
        return Outcome(address, FAILED, count, found, reason)
    LOG.error('%s on %s fenced (failed): %s', address, nodename, reason)
    return Outcome(address, FENCED, count, found, reason)
