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

"""Accelerators in the guest: units from allocations, hostdevs in the XML.

For the libvirt driver only. Placement says which consumer holds how
much of each accelerator provider; the host's unit store
(:mod:`cyborg_nova.assignments`) says which concrete functions serve
each allocation, keyed by provider and consumer exactly as Placement
keys it. This mixin keeps the two in step through every Nova operation:

- spawn, finish_migration, hard reboot (and so power-on and host-boot
  resume): the instance's units on this host's providers are made to
  match its allocations there (missing units assigned, others freed);
- migrate_disk_and_power_off: Nova's conductor moved the instance's
  allocation on this host to the migration record; its units follow;
- confirm_migration: the migration record's units are freed;
- finish_revert_migration: the migration record's units go back to the
  instance (as its allocation did);
- cleanup: units are freed when the guest leaves this host for good
  (delete, shelve offload, revert on the destination, the source after
  an evacuation), kept when it comes back (hard reboot, rebuild);
- every update cycle: each provider's units are reconciled with
  Placement's allocations; units whose consumer lost its allocation are
  freed, except those a domain on the host still has as hostdevs, which
  stay taken and reserved until the domain is gone.

Live migration of an instance with accelerator units is refused in
Nova's pre-check: its functions cannot follow it.

Which providers are this host's never comes from ``instance.node``: in
an evacuation it still names the source until after spawn. It comes from
the nodes this driver serves and the devices its store knows on them.
"""

from __future__ import annotations

import logging
import time
from xml.etree import ElementTree

from nova.compute import task_states
from nova import context as nova_context
from nova import exception
from nova.scheduler import utils as scheduler_utils
from nova.virt.libvirt import config as vconfig

from cyborg_drivers import device as device_model
from cyborg_drivers import guest_xml
from cyborg_drivers import vgpu
from cyborg_nova import assignments
from cyborg_nova import audit
from cyborg_nova import remote_devices
from cyborg_nova import vgpus
from cyborg_nova.virt import moves

LOG = logging.getLogger(__name__)

#: Seconds a suspending guest has to release each PCI unit unplugged
#: from it (a Linux guest's PCIe hot-plug driver waits 5 s first).
SUSPEND_DETACH_TIMEOUT = 60

# Task states in which cleanup() destroys a guest that comes back on
# this host at once, so it keeps its units.
_COMES_BACK = (task_states.REBUILDING,
               task_states.REBUILD_BLOCK_DEVICE_MAPPING,
               task_states.REBUILD_SPAWNING)


def pci_hostdev(address: str, managed: bool = True
                ) -> vconfig.LibvirtConfigGuestHostdevPCI:
    """A PCI ``<hostdev>`` for the function at ``address``.

    Nova's config object (what its guest config holds), made of the same
    fields as :func:`cyborg_drivers.guest_xml.pci_hostdev`, whose text
    the hot-plug paths use: the two render the same XML.

    :param managed: False for a vendor-VFIO vGPU VF, which keeps the
        NVIDIA driver (its VFIO driver) instead of getting vfio-pci.
    :raises ValueError: ``address`` is not a PCI address.
    """
    dev = vconfig.LibvirtConfigGuestHostdevPCI()
    dev.domain, dev.bus, dev.slot, dev.function = (
        guest_xml.pci_address_fields(address))
    dev.managed = guest_xml.MANAGED if managed else guest_xml.UNMANAGED
    return dev


def mdev_hostdev(mdev: str) -> vconfig.LibvirtConfigGuestHostdevMDEV:
    """An mdev ``<hostdev>`` (a vGPU) for mediated device ``mdev``."""
    dev = vconfig.LibvirtConfigGuestHostdevMDEV()
    dev.uuid = mdev
    return dev


class GuestAcceleratorsMixin:
    """Puts the instance's accelerator units into its libvirt guest.

    Mixed in behind :class:`~cyborg_nova.virt.extension.
    AcceleratorProviderMixin` (whose updater and store it uses).
    """

    def __init__(self, virtapi, *args, **kwargs) -> None:
        super().__init__(virtapi, *args, **kwargs)
        self._unit_assignments: assignments.Assignments | None = None
        #: The privileged writes that make and undo vGPU units.
        self._vgpu_ops = vgpus.PrivsepOps()
        # (provider, consumer, allocated, assigned) already logged short.
        self._short_logged: set[tuple] = set()

    # -- where the units live ------------------------------------------------

    def _assignments(self) -> assignments.Assignments:
        # Opened once: opening creates (and migrates) the table in a
        # write transaction, which the update cycle and every guest build
        # would otherwise pay.
        if self._unit_assignments is None:
            self._updater()
            self._unit_assignments = assignments.Assignments(
                self._accelerator_store)
        return self._unit_assignments

    def _accelerator_of(self, rp, node, address, found, remote):
        """The device behind provider ``rp``, local or remote; or None."""
        if rp == remote_devices.provider_uuid(node, address):
            device = remote.get(rp)
            return device.accelerator if device is not None else None
        return found.get(address)

    # -- making a consumer's units match its allocations --------------------

    def _sync_units(self, context, instance, allocations, strict=True):
        """Make ``instance``'s units here match ``allocations``.

        :param allocations: the instance's allocations ({provider:
            {'resources': ...}}); providers of other hosts are ignored.
        :param strict: raise when a unit cannot be given (a build then
            fails and is rescheduled); otherwise log it.
        :raises nova.exception.ComputeResourcesUnavailable: with
            ``strict``: no free unit, the device cannot be read or is
            gone, or a vGPU unit cannot be made (:mod:`vgpus`).
        """
        ours = self._our_providers()
        store = self._assignments()
        wanted = {rp: alloc.get('resources', {})
                  for rp, alloc in (allocations or {}).items()
                  if rp in ours and any(alloc.get('resources', {}).values())}
        held = store.of_consumer(instance.uuid, ours)
        for rp in sorted(set(held) - set(wanted)):
            store.release(instance.uuid, rp)
            LOG.info('Instance %s no longer holds accelerator %s: released '
                     '%s', instance.uuid, ours[rp][1], ', '.join(held[rp]))
            self._retire(held[rp])
        if not wanted:
            # An ordinary flavor never reads the accelerators: a host
            # whose sysfs cannot be read still builds it.
            return
        try:
            found = self._updater().discoverer.discover().by_address()
        except Exception as exc:
            return self._unavailable(
                strict, instance, 'cannot read the accelerators of this '
                'host: %s' % exc)
        remote = {}
        for node in sorted({ours[rp][0] for rp in wanted}):
            remote.update(remote_devices.by_provider(
                self._updater().store, node, found.values()))
        links = moves.links(context)
        in_domains = self._domain_units_lookup()
        for rp, resources in sorted(wanted.items()):
            node, address = ours[rp]
            accelerator = self._accelerator_of(rp, node, address, found,
                                               remote)
            if accelerator is None:
                self._unavailable(
                    strict, instance, 'accelerator %s (provider %s) is '
                    'allocated but not on the bus' % (address, rp))
                continue
            count = resources.get(accelerator.resource_class, 0)
            if not count:
                continue
            self._reconcile_provider(context, rp, links, in_domains)
            try:
                units = store.assign(instance.uuid, rp, accelerator.units,
                                     count)
            except assignments.NoFreeUnits as exc:
                self._unavailable(strict, instance, str(exc))
                continue
            extra = store.trim(instance.uuid, rp, count)
            if extra:
                LOG.info('Instance %s now holds %d of accelerator %s: '
                         'released %s', instance.uuid, count, address,
                         ', '.join(extra))
                self._retire(extra)
            try:
                made = vgpus.prepare(self._sysfs_root(), accelerator,
                                     units[:count], self._vgpu_ops)
            except vgpus.VgpuError as exc:
                self._unavailable(strict, instance, 'accelerator %s: %s'
                                  % (address, exc))
                continue
            if made:
                LOG.info('Instance %s: vGPU units made on accelerator %s: '
                         '%s', instance.uuid, address, ', '.join(made))
            LOG.info('Instance %s gets %s of accelerator %s', instance.uuid,
                     ', '.join(units), address)

    def _retire(self, units) -> None:
        """Undo the vGPUs of units just freed (see :mod:`vgpus`)."""
        if units:
            vgpus.retire(self._sysfs_root(), units, self._vgpu_ops)

    def _release(self, consumer, providers) -> int:
        """Free what ``consumer`` holds on ``providers``; how many."""
        store = self._assignments()
        held = store.of_consumer(consumer, providers)
        freed = store.release(consumer, providers=providers)
        self._retire([u for units in held.values() for u in units])
        return freed

    def _move(self, source, dest, providers) -> int:
        """The units follow an allocation Placement moved; how many."""
        store = self._assignments()
        before = store.of_consumer(dest, providers)
        moved = store.move(source, dest, providers)
        kept = {u for units in store.of_consumer(dest, providers).values()
                for u in units}
        self._retire([u for units in before.values() for u in units
                      if u not in kept])
        return moved

    @staticmethod
    def _unavailable(strict, instance, reason):
        if strict:
            raise exception.ComputeResourcesUnavailable(reason=reason)
        # The guest still gets every unit recorded for it, a vGPU unit
        # that could not be made included: it does not go without the
        # accelerator, it gets what is recorded, as it is.
        LOG.error('cyborg-nova: instance %s: accelerator units could not '
                  'be given: %s; the guest is defined with the units '
                  'recorded for it here, as they are', instance.uuid,
                  reason)

    def _domain_units_lookup(self) -> assignments.DomainLookup:
        """The units this host's domains hold, read once when first asked.

        Every domain counts, running or only defined (a stopped guest
        gets its hostdevs back at its next start), as ``cyborg-nova
        audit`` counts them.
        """
        cache: list = []

        def lookup():
            if not cache:
                cache.append(self._domain_units())
            return cache[0]
        return lookup

    def _domain_units(self) -> dict[str, str] | None:
        try:
            found = {}
            for guest in self._host.list_guests(only_running=False):
                for unit in audit.hostdev_addresses(guest.get_xml_desc()):
                    found.setdefault(unit, guest.uuid)
            return found
        except Exception as exc:
            LOG.warning('cyborg-nova: cannot list the hostdevs of this '
                        "host's domains: %s", exc)
            return None

    def _reconcile_provider(self, context, rp, links, in_domains) -> None:
        read_at = time.time()
        holders = moves.provider_holders(context, rp)
        if holders is None:
            # Placement cannot say: keep every unit rather than free one
            # a guest may be using.
            return
        result = self._assignments().reconcile(rp, holders, read_at, links,
                                               in_domains)
        for source, dest, units in result.moved:
            LOG.info('Units %s of provider %s follow the allocation from '
                     'consumer %s to %s', ', '.join(units), rp, source, dest)
        for consumer, units in result.released.items():
            LOG.info('Consumer %s holds nothing on provider %s any more: '
                     'released %s', consumer, rp, ', '.join(units))
            self._retire(units)
        for consumer, kept in result.kept.items():
            LOG.warning('Consumer %s holds nothing on provider %s in '
                        'Placement any more, but domain(s) %s still have '
                        '%s as hostdevs: kept, and reserved, until the '
                        'domain is gone', consumer, rp,
                        ', '.join(sorted(set(kept.values()))),
                        ', '.join(sorted(kept)))
        for consumer, (amount, have) in result.short.items():
            if (rp, consumer, amount, have) not in self._short_logged:
                self._short_logged.add((rp, consumer, amount, have))
                LOG.warning('Consumer %s holds %d unit(s) of provider %s '
                            'in Placement but %d are assigned here; they '
                            'are assigned at its next guest build',
                            consumer, amount, rp, have)

    def update_provider_tree(self, provider_tree, nodename,
                             allocations=None):
        super().update_provider_tree(provider_tree, nodename,
                                     allocations=allocations)
        try:
            context = nova_context.get_admin_context()
            links = moves.links(context)
            in_domains = self._domain_units_lookup()
            for rp in sorted(self._our_providers([nodename])):
                self._reconcile_provider(context, rp, links, in_domains)
        except Exception:
            LOG.exception('cyborg-nova: units of %s not reconciled with '
                          'Placement this cycle', nodename)

    # -- Nova's operations ---------------------------------------------------

    def spawn(self, context, instance, image_meta, injected_files,
              admin_password, allocations, *args, **kwargs):
        self._sync_units(context, instance, allocations)
        return super().spawn(context, instance, image_meta, injected_files,
                             admin_password, allocations, *args, **kwargs)

    def _live_attached(self, context, instance, consumer) -> list[str]:
        """What ``consumer`` holds here beyond ``instance``'s flavor.

        Units ``cyborg-nova instance-attach`` added to a running guest
        are allocated to the instance but asked for by no flavor: Nova's
        scheduler does not claim them on a destination, and its move
        deletes them with the source's allocation. One sentence per
        resource class held beyond what the flavor asks for (Nova's own
        reading of the flavor, ``resources_from_flavor``), naming the
        accelerators that hold it.
        """
        allocations = moves.consumer_allocations(context, consumer)
        if not allocations:
            return []
        ours = self._our_providers()
        held: dict[str, dict[str, int]] = {}
        for rp, alloc in allocations.items():
            if rp not in ours:
                continue
            for rc, amount in alloc.get('resources', {}).items():
                held.setdefault(rc, {})[ours[rp][1]] = amount
        if not held:
            return []
        asked = scheduler_utils.resources_from_flavor(
            instance, instance.flavor)
        return ['%d %s on %s, its flavor asks for %d'
                % (sum(by.values()), rc, ', '.join(sorted(by)),
                   asked.get(rc, 0))
                for rc, by in sorted(held.items())
                if sum(by.values()) > asked.get(rc, 0)]

    def migrate_disk_and_power_off(self, context, instance, *args,
                                   **kwargs):
        # Refused before the guest is touched: InstanceFaultRollback
        # makes Nova put the instance back as it was, the allocations
        # back to it, and fail the migration with this reason.
        link = moves.links(context)(instance.uuid)
        consumer = (link.migration if link is not None
                    and link.instance == instance.uuid else instance.uuid)
        extra = self._live_attached(context, instance, consumer)
        if extra:
            reason = ('instance %s holds accelerators attached to it '
                      'live (instance-attach), which a resize or cold '
                      'migration cannot carry: %s; detach them first '
                      '(cyborg-nova instance-detach), or give the '
                      'instance a flavor that asks for them'
                      % (instance.uuid, '; '.join(extra)))
            LOG.warning('cyborg-nova: move of %s refused: %s',
                        instance.uuid, reason)
            raise exception.InstanceFaultRollback(
                inner_exception=exception.ResizeError(reason=reason))
        result = super().migrate_disk_and_power_off(context, instance,
                                                    *args, **kwargs)
        # Nova's conductor moved the instance's allocation here to the
        # migration record: the units the stopped guest used follow it
        # (on a same-host resize the new guest gets units of its own).
        link = moves.links(context)(instance.uuid)
        if link is not None and link.instance == instance.uuid:
            moved = self._move(instance.uuid, link.migration,
                               self._our_providers())
            if moved:
                LOG.info('Instance %s: %d accelerator unit(s) now held by '
                         'migration %s', instance.uuid, moved,
                         link.migration)
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
        freed = self._release(migration.uuid, self._our_providers())
        if freed:
            LOG.info('Instance %s: resize confirmed, released %d '
                     'accelerator unit(s) of migration %s', instance.uuid,
                     freed, migration.uuid)

    def finish_revert_migration(self, context, instance, network_info,
                                migration, *args, **kwargs):
        # Nova moved the migration record's allocation back to the
        # instance before calling this; the units follow it, and what
        # the instance held on the reverted flavor is freed.
        self._move(migration.uuid, instance.uuid, self._our_providers())
        allocations = moves.consumer_allocations(context, instance.uuid)
        if allocations is not None:
            self._sync_units(context, instance, allocations, strict=False)
        return super().finish_revert_migration(
            context, instance, network_info, migration, *args, **kwargs)

    def _hard_reboot(self, context, instance, *args, **kwargs):
        # Hard reboot, power-on and host-boot resume rebuild the guest:
        # an allocation whose units were lost is repaired here.
        allocations = moves.consumer_allocations(context, instance.uuid)
        if allocations is not None:
            self._sync_units(context, instance, allocations, strict=False)
        return super()._hard_reboot(context, instance, *args, **kwargs)

    # -- suspend and resume --------------------------------------------------

    def _pci_units(self, instance) -> list[str]:
        """The PCI functions ``instance`` holds on this host, sorted."""
        held = self._assignments().of_consumer(instance.uuid,
                                               self._our_providers())
        return sorted(u for units in held.values() for u in units
                      if device_model.is_pci_address(u))

    def _unit_hostdev(self, unit: str):
        return pci_hostdev(unit, managed=not vgpu.is_vendor_vfio(
            self._sysfs_root(), unit))

    @staticmethod
    def _in_guest(guest, unit: str) -> bool:
        # The libvirtd's own description of its domain, not user input.
        return guest_xml.hostdev_in_domain(
            ElementTree.fromstring(guest.get_xml_desc()),  # nosec B314
            unit)

    def suspend(self, context, instance):
        # QEMU cannot save a guest that has a VFIO device without
        # migration support, and libvirt refuses the managed save (shown
        # on a real kernel and libvirt by the real-kernel tests). As
        # Nova does for its own PCI devices and mdevs: the units are
        # unplugged from the running guest first (its definition keeps
        # them, and the allocation and the units stay the instance's),
        # and plugged in again at resume. Nova's own suspend unplugs the
        # mdevs, ours among them.
        guest = self._host.get_guest(instance)
        units = [u for u in self._pci_units(instance)
                 if self._in_guest(guest, u)]
        unplugged = []
        try:
            for unit in units:
                guest.detach_device(self._unit_hostdev(unit), live=True)
                deadline = time.monotonic() + SUSPEND_DETACH_TIMEOUT
                while self._in_guest(guest, unit):
                    if time.monotonic() > deadline:
                        raise exception.InstanceSuspendFailure(
                            reason='the guest did not release accelerator '
                                   'unit %s within %d s'
                                   % (unit, SUSPEND_DETACH_TIMEOUT))
                    time.sleep(0.5)
                unplugged.append(unit)
            if unplugged:
                LOG.info('Instance %s: accelerator units %s unplugged for '
                         'the suspend', instance.uuid, ', '.join(unplugged))
            return super().suspend(context, instance)
        except Exception as exc:
            self._replug(guest, instance, unplugged)
            if isinstance(exc, exception.InstanceFaultRollback):
                raise
            raise exception.InstanceFaultRollback(
                inner_exception=exception.InstanceSuspendFailure(
                    reason='accelerator units of instance %s: %s'
                           % (instance.uuid, exc)))

    def _replug(self, guest, instance, units) -> list[str]:
        """Plug ``units`` into the running guest where missing; which."""
        plugged = []
        for unit in units:
            try:
                if not self._in_guest(guest, unit):
                    guest.attach_device(self._unit_hostdev(unit), live=True)
                    plugged.append(unit)
            except Exception as exc:
                LOG.error('Instance %s: accelerator unit %s could not be '
                          'plugged in again: %s; a hard reboot gives the '
                          'guest its units', instance.uuid, unit, exc)
        return plugged

    def resume(self, context, instance, network_info, *args, **kwargs):
        result = super().resume(context, instance, network_info, *args,
                                **kwargs)
        # Restored from the save image, which has no unit: they go back
        # in as they went out.
        plugged = self._replug(self._host.get_guest(instance), instance,
                               self._pci_units(instance))
        if plugged:
            LOG.info('Instance %s: accelerator units %s plugged in again '
                     'after the resume', instance.uuid, ', '.join(plugged))
        return result

    def check_can_live_migrate_source(self, context, instance,
                                      dest_check_data, *args, **kwargs):
        ours = self._our_providers()
        store = self._assignments()
        held = store.of_consumer(instance.uuid, ours)
        link = moves.links(context)(instance.uuid)
        if link is not None and link.instance == instance.uuid:
            held.update(store.of_consumer(link.migration, ours))
        if held:
            units = sorted(u for us in held.values() for u in us)
            raise exception.MigrationPreCheckError(
                reason='instance %s holds accelerator units %s on this '
                       'host; cyborg-nova cannot live-migrate them: cold '
                       'migrate or resize it instead'
                       % (instance.uuid, ', '.join(units)))
        return super().check_can_live_migrate_source(
            context, instance, dest_check_data, *args, **kwargs)

    def _get_guest_config(self, instance, *args, **kwargs):
        guest = super()._get_guest_config(instance, *args, **kwargs)
        held = self._assignments().of_consumer(instance.uuid,
                                               self._our_providers())
        # Nova's hard reboot passes the mdevs of the old definition back
        # in: ours among them are not added twice.
        present = {d.uuid for d in guest.devices
                   if isinstance(d, vconfig.LibvirtConfigGuestHostdevMDEV)}
        root = self._sysfs_root()
        for _, units in sorted(held.items()):
            for unit in units:
                if not device_model.is_pci_address(unit):
                    if unit not in present:
                        guest.add_device(mdev_hostdev(unit))
                    continue
                guest.add_device(pci_hostdev(
                    unit, managed=not vgpu.is_vendor_vfio(root, unit)))
        return guest

    def _allocate_mdevs(self, allocations):
        # Nova's own vGPU code would look for a parent device in the
        # names of this project's providers and fail: their VGPU units
        # are made here (_sync_units), so Nova sees only the others.
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
            reason = self._leaving(instance, destroy_disks)
            if reason:
                freed = self._release(instance.uuid, self._our_providers())
                if freed:
                    LOG.info('Instance %s released %d accelerator unit(s) '
                             '(%s)', instance.uuid, freed, reason)

    def _leaving(self, instance, destroy_disks) -> str | None:
        """Why the guest leaves this host for good, or None if it stays."""
        if instance.task_state == task_states.RESIZE_REVERTING:
            return 'resize reverted away from this host'
        if instance.node not in self._our_nodes():
            return 'the instance lives on %s now' % instance.node
        if destroy_disks and instance.task_state not in _COMES_BACK:
            return 'guest destroyed with its disks'
        return None
