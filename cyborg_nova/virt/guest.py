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

"""Nova's hooks into the unit books (:mod:`cyborg_nova.guests`).

For the libvirt driver only: Nova's hooks, each handing Nova's view
(allocations, migration records, the domains' hostdevs) to the unit
books (:mod:`cyborg_nova.guests`) as plain data. A guest build reads no
sysfs: the devices come from what the update cycle recorded, the
``<hostdev>`` kinds from the unit rows. Which providers are this host's
never comes from ``instance.node`` (in an evacuation it names the
source until after spawn).
"""

from __future__ import annotations

import logging
import threading

from nova.compute import resource_tracker
import nova.conf
from nova import context as nova_context
from nova import exception
from nova import utils as nova_utils

from cyborg_nova import assignments
from cyborg_nova import fencing
from cyborg_nova import guests
from cyborg_nova import provider_devices
from cyborg_nova import scrub
from cyborg_nova.store import units as unit_store
from cyborg_nova import unit_work
from cyborg_nova.virt import hostdevs
from cyborg_nova.virt import moves

LOG = logging.getLogger(__name__)
CONF = nova.conf.CONF


class GuestAcceleratorsMixin:
    """Puts the instance's accelerator units into its libvirt guest.

    Mixed in behind :class:`~cyborg_nova.virt.extension.
    AcceleratorProviderMixin` (whose updater and store it uses).
    """

    def __init__(self, virtapi, *args, **kwargs) -> None:
        super().__init__(virtapi, *args, **kwargs)
        self._unit_books: guests.UnitBooks | None = None
        self._unit_scrubber: scrub.Scrubber | None = None
        #: The privileged writes that make and undo vGPU units.
        self._unit_ops = unit_work.PrivsepOps()
        #: The privileged writes of the scrub steps.
        self._scrub_ops = unit_work.PrivsepOps()

    def _books(self) -> guests.UnitBooks:
        # Opened once: opening migrates the store in a write transaction.
        if self._unit_books is None:
            self._updater()
            self._unit_books = guests.UnitBooks(
                assignments.Assignments(self._accelerator_store,
                                        hold_freed=CONF.cyborg_scrub.enabled),
                guests.DriverWork(self._sysfs_root, lambda: self._unit_ops),
                on_freed=self._scrub_soon)
        return self._unit_books

    def _scrubber(self) -> scrub.Scrubber:
        if self._unit_scrubber is None:
            # The updater opens the store.
            self._updater()
            fencer = fencing.Fencer(
                self._placement(), kept=self._accelerator_store.units.kept)

            # Under the resource tracker's lock: a report computed while
            # the unit was held, and sent after this write, would put
            # the unit back in reserved until the next cycle.
            @nova_utils.synchronized(
                resource_tracker.COMPUTE_RESOURCE_SEMAPHORE, fair=True)
            def fence(device, state):
                return fencer.apply(device.address, device.provider, state,
                                    device.accelerator)
            self._unit_scrubber = scrub.Scrubber(
                CONF, self._accelerator_store,
                lambda: self._updater().discoverer.drivers,
                self._sysfs_root, lambda: self._scrub_ops,
                lambda rps: self._devices(self._our_providers())(rps),
                fence)
        return self._unit_scrubber

    def _scrub_soon(self) -> None:
        """Scrub the held units in the background (see :mod:`scrub`)."""
        def run():
            try:
                self._scrubber().run()
            except Exception:
                LOG.exception('cyborg-nova: held units not scrubbed now; '
                              'retried at the next update cycle')
        threading.Thread(target=run, name='cyborg-nova-scrub',
                         daemon=True).start()

    def _devices(self, ours) -> guests.DeviceLookup:
        """{provider: device} as the update cycle recorded them.

        :param ours: this host's providers (:meth:`_our_providers`), read
            once by the caller.
        """
        return lambda providers: provider_devices.of_providers(
            self._updater().store, ours, providers,
            lambda: self._updater().discoverer.discover().accelerators)

    def _reconciler(self, context):
        links = moves.links(context)
        in_domains = hostdevs.domain_units(self._host)
        return lambda rp: self._books().reconcile(
            rp, lambda p: moves.provider_holders(context, p), links,
            in_domains)

    def _sync_units(self, context, instance, allocations, strict=True):
        """Make ``instance``'s units here match ``allocations``.

        :raises nova.exception.ComputeResourcesUnavailable: with
            ``strict``, a unit cannot be given (a build is rescheduled).
        """
        ours = self._our_providers()
        try:
            self._books().give(instance.uuid, allocations, ours,
                               self._devices(ours),
                               self._reconciler(context), strict)
        except guests.UnitsUnavailable as exc:
            raise exception.ComputeResourcesUnavailable(reason=str(exc))

    def _held(self, instance) -> list[guests.Hostdev]:
        ours = self._our_providers()
        return self._books().hostdevs(instance.uuid, ours,
                                      self._devices(ours))

    def update_provider_tree(self, provider_tree, nodename,
                             allocations=None):
        super().update_provider_tree(provider_tree, nodename,
                                     allocations=allocations)
        try:
            reconcile = self._reconciler(nova_context.get_admin_context())
            for rp in self._books().providers_in_use(
                    self._our_providers([nodename])):
                reconcile(rp)
        except Exception:
            LOG.exception('cyborg-nova: units of %s not reconciled with '
                          'Placement this cycle', nodename)
        # Units held since a restart (or by a hot-plug detach) are
        # scrubbed now; those being scrubbed are left to their run.
        if self._accelerator_store is not None and (
                self._accelerator_store.units.holds(
                    state=unit_store.SCRUBBING)):
            self._scrub_soon()

    # -- Nova's operations ---------------------------------------------------

    def spawn(self, context, instance, image_meta, injected_files,
              admin_password, allocations, *args, **kwargs):
        self._sync_units(context, instance, allocations)
        return super().spawn(context, instance, image_meta, injected_files,
                             admin_password, allocations, *args, **kwargs)

    def migrate_disk_and_power_off(self, context, instance, *args,
                                   **kwargs):
        # Refused before the guest is touched: InstanceFaultRollback
        # makes Nova put the instance back as it was.
        reason = moves.live_attached(context, instance,
                                     self._our_providers())
        if reason:
            LOG.warning('cyborg-nova: move of %s refused: %s',
                        instance.uuid, reason)
            raise exception.InstanceFaultRollback(
                inner_exception=exception.ResizeError(reason=reason))
        result = super().migrate_disk_and_power_off(context, instance,
                                                    *args, **kwargs)
        # Nova's conductor moved the instance's allocation here to the
        # migration record: the units the stopped guest used follow it.
        consumer = moves.move_consumer(context, instance.uuid)
        if consumer != instance.uuid:
            self._books().move(instance.uuid, consumer,
                               self._our_providers(), 'the instance moves')
        return result

    def finish_migration(self, context, migration, instance, disk_info,
                         network_info, image_meta, resize_instance,
                         allocations, *args, **kwargs):
        self._sync_units(context, instance, allocations)
        return super().finish_migration(
            context, migration, instance, disk_info, network_info,
            image_meta, resize_instance, allocations, *args, **kwargs)

    def confirm_migration(self, context, migration, instance, network_info):
        super().confirm_migration(context, migration, instance,
                                  network_info)
        self._books().release(migration.uuid, self._our_providers(),
                              'instance %s confirmed its move'
                              % instance.uuid)

    def finish_revert_migration(self, context, instance, network_info,
                                migration, *args, **kwargs):
        # Nova moved the migration record's allocation back to the
        # instance before calling this; the units follow it.
        self._books().move(migration.uuid, instance.uuid,
                           self._our_providers())
        self._resync(context, instance)
        return super().finish_revert_migration(
            context, instance, network_info, migration, *args, **kwargs)

    def _hard_reboot(self, context, instance, *args, **kwargs):
        # Hard reboot, power-on and host-boot resume rebuild the guest:
        # an allocation whose units were lost is repaired here.
        self._resync(context, instance)
        return super()._hard_reboot(context, instance, *args, **kwargs)

    def _resync(self, context, instance) -> None:
        allocations = moves.consumer_allocations(context, instance.uuid)
        if allocations is not None:
            self._sync_units(context, instance, allocations, strict=False)

    def suspend(self, context, instance):
        hostdevs.suspend_without(
            self._host.get_guest(instance), instance,
            self._pci_held(instance),
            lambda: super(GuestAcceleratorsMixin, self).suspend(context,
                                                                instance))

    def _pci_held(self, instance) -> list[guests.Hostdev]:
        return hostdevs.pci_only(self._held(instance))

    def resume(self, context, instance, network_info, *args, **kwargs):
        result = super().resume(context, instance, network_info, *args,
                                **kwargs)
        hostdevs.replug(self._host.get_guest(instance), instance,
                        self._pci_held(instance))
        return result

    def check_can_live_migrate_source(self, context, instance,
                                      dest_check_data, *args, **kwargs):
        units = self._books().units_of(
            {instance.uuid, moves.move_consumer(context, instance.uuid)},
            self._our_providers())
        if units:
            raise exception.MigrationPreCheckError(
                reason=moves.no_live_migration(instance, units))
        return super().check_can_live_migrate_source(
            context, instance, dest_check_data, *args, **kwargs)

    def _get_guest_config(self, instance, *args, **kwargs):
        guest = super()._get_guest_config(instance, *args, **kwargs)
        hostdevs.add_to_guest(guest, self._held(instance))
        return guest

    def _allocate_mdevs(self, allocations):
        # Nova's own vGPU code would look for a parent device in the
        # names of this project's providers and fail: their VGPU units
        # are made by the unit books, so Nova sees only the others.
        ours = self._our_providers()
        return super()._allocate_mdevs(
            {rp: alloc for rp, alloc in (allocations or {}).items()
             if rp not in ours})

    def cleanup(self, context, instance, network_info,
                block_device_info=None, destroy_disks=True,
                migrate_data=None, destroy_vifs=True,
                destroy_secrets=True):
        try:
            return super().cleanup(
                context, instance, network_info,
                block_device_info=block_device_info,
                destroy_disks=destroy_disks, migrate_data=migrate_data,
                destroy_vifs=destroy_vifs, destroy_secrets=destroy_secrets)
        finally:
            reason = moves.leaving(instance, self._our_nodes(),
                                   destroy_disks)
            if reason:
                self._books().release(instance.uuid, self._our_providers(),
                                      reason)
