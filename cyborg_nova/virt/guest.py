"""Accelerators in the guest: units from allocations, hostdevs in the XML.

For the libvirt driver only. At spawn (and when a migration or resize
lands) the instance's Placement allocations on accelerator providers are
turned into concrete units, recorded in the host's state store; whenever
Nova builds the guest's XML (spawn, hard reboot, host-boot resume), the
recorded units become ``<hostdev>`` elements, built with Nova's own
libvirt config classes.
"""

from __future__ import annotations

import logging

import nova.conf
from nova import exception
from nova.virt.libvirt import config as vconfig

from cyborg_drivers import device as device_model
from cyborg_nova import assignments
from cyborg_nova import providers

LOG = logging.getLogger(__name__)
CONF = nova.conf.CONF


def pci_hostdev(address: str) -> vconfig.LibvirtConfigGuestHostdevPCI:
    """A managed PCI ``<hostdev>`` for the function at ``address``.

    :raises ValueError: ``address`` is not a PCI address.
    """
    if not device_model.is_pci_address(address):
        raise ValueError('not a PCI address: %r' % address)
    domain, bus, slot_function = address.split(':')
    slot, function = slot_function.split('.')
    dev = vconfig.LibvirtConfigGuestHostdevPCI()
    dev.domain, dev.bus, dev.slot, dev.function = (domain, bus, slot,
                                                   function)
    # libvirt detaches the function from its host driver (binding
    # vfio-pci) when the guest starts and gives it back when it stops.
    dev.managed = 'yes'
    return dev


class GuestAcceleratorsMixin:
    """Puts the instance's accelerator units into its libvirt guest.

    Mixed in front of :class:`~cyborg_nova.virt.extension.
    AcceleratorProviderMixin` (whose updater and store it uses).
    """

    def _assignments(self) -> assignments.Assignments:
        self._updater()
        return assignments.Assignments(self._accelerator_store)

    def _assign_accelerators(self, instance, allocations) -> None:
        """Record the units of ``allocations`` on our providers.

        :raises nova.exception.ComputeResourcesUnavailable: the provider
            has no free unit left, or its device cannot be given to a
            guest by this release; the build fails and is rescheduled.
        """
        if not allocations:
            return
        nodename = instance.node
        ours = {providers.provider_uuid(nodename, a.address): a
                for a in self._updater().discoverer.discover().accelerators}
        store = self._assignments()
        for rp_uuid, alloc in allocations.items():
            accelerator = ours.get(rp_uuid)
            if accelerator is None:
                continue
            count = alloc.get('resources', {}).get(
                accelerator.resource_class, 0)
            if not count:
                continue
            if accelerator.mdev_types and accelerator.capabilities and (
                    dict(accelerator.capabilities).get('vgpu_type')):
                raise exception.ComputeResourcesUnavailable(
                    reason='accelerator %s offers vGPU (mdev) units, which '
                           'this release cannot attach yet'
                           % accelerator.address)
            try:
                units = store.assign(nodename, instance.uuid, rp_uuid,
                                     accelerator.units, count)
            except assignments.NoFreeUnits as exc:
                raise exception.ComputeResourcesUnavailable(reason=str(exc))
            LOG.info('Instance %s gets %s of accelerator %s', instance.uuid,
                     ', '.join(units), accelerator.address)

    def spawn(self, context, instance, image_meta, injected_files,
              admin_password, allocations, *args, **kwargs):
        self._assign_accelerators(instance, allocations)
        return super().spawn(context, instance, image_meta, injected_files,
                             admin_password, allocations, *args, **kwargs)

    def finish_migration(self, context, migration, instance, disk_info,
                         network_info, image_meta, resize_instance,
                         allocations, *args, **kwargs):
        # The destination's units, from the destination's allocations.
        self._assign_accelerators(instance, allocations)
        return super().finish_migration(
            context, migration, instance, disk_info, network_info,
            image_meta, resize_instance, allocations, *args, **kwargs)

    def _get_guest_config(self, instance, *args, **kwargs):
        guest = super()._get_guest_config(instance, *args, **kwargs)
        held = self._assignments().of_consumer(instance.node, instance.uuid)
        for _, units in sorted(held.items()):
            for unit in units:
                guest.add_device(pci_hostdev(unit))
        return guest

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
            # A hard reboot also destroys the guest, keeping its disks:
            # the instance stays, and so do its units.
            if destroy_disks:
                self._release(instance, instance.node)

    def confirm_migration(self, context, migration, instance, network_info):
        super().confirm_migration(context, migration, instance,
                                  network_info)
        # The instance now lives on the destination, with its own units.
        self._release(instance, migration.source_node)

    def _release(self, instance, nodename: str) -> None:
        freed = self._assignments().release(nodename, instance.uuid)
        if freed:
            LOG.info('Instance %s released %d accelerator unit(s) on %s',
                     instance.uuid, freed, nodename)
