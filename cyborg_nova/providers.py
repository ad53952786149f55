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

"""Accelerators as child resource providers of the compute node.

:class:`ProviderTreeUpdater` edits the ``ProviderTree`` that Nova's
resource tracker hands to ``update_provider_tree``; Nova's report client
then diffs that tree against Placement and writes what changed. Nothing
here talks to Placement to change it: Nova stays the only writer of its
provider tree, and a cycle that changes nothing writes nothing.

What the project owns, and so the only things it changes:

- providers named ``<nodename>_accelerator_<PCI address>`` whose parent
  is the compute node provider of ``nodename``;
- on those providers, their inventory and the traits it set itself (the
  state store remembers which), never traits others added;
- nothing on the compute node provider.
"""

from __future__ import annotations

import logging
from typing import Callable

import os_traits

from cyborg_drivers import device as device_model
from cyborg_drivers import discovery
from cyborg_nova import health
from cyborg_nova import provider_devices
from cyborg_nova import remote_devices
from cyborg_nova import store as state_store

LOG = logging.getLogger(__name__)

OWNER_TRAIT = os_traits.OWNER_CYBORG
NAME_INFIX = '_accelerator_'

#: ``allocations_for(rp_uuid)``: the consumers holding resources of that
#: provider ({} when none), or None when Placement cannot say.
AllocationLookup = Callable[[str], 'dict | None']


def provider_name(nodename: str, address: str) -> str:
    return '%s%s%s' % (nodename, NAME_INFIX, address)


def provider_uuid(nodename: str, address: str) -> str:
    """Stable across restarts and rebuilds: derived, never stored."""
    return device_model.device_uuid(nodename, address)


def reserved(state: str, accelerator: device_model.Accelerator | None,
             total: int, kept: int = 0) -> int:
    """How much of a provider's ``total`` must be held back.

    Everything unless the device is ready, present, set up and without
    problems: a device nobody vouched for, an unhealthy, half set up or
    vanished one is never handed out. Otherwise the ``kept`` units: those
    a libvirt domain still holds after their allocation went (see
    :meth:`cyborg_nova.assignments.Assignments.reconcile`), which nothing
    may be scheduled onto. The agent computes the same value when it
    fences at once.
    """
    if (accelerator is None or state != state_store.READY
            or accelerator.setup_required or accelerator.problems):
        return total
    return min(total, kept)


def one_time_traits(one_time_use: bool) -> set[str]:
    """The trait of a provider whose freed units wait for the operator.

    ``HW_PCI_ONE_TIME_USE``, as Nova's one-time-use PCI devices carry.
    """
    return {os_traits.HW_PCI_ONE_TIME_USE} if one_time_use else set()


def fully_reserved(inventories: dict) -> dict:
    """``inventories`` with each record's ``reserved`` = its total."""
    return {rc: dict(inv, reserved=inv['total'])
            for rc, inv in inventories.items()}


def inventory(accelerator: device_model.Accelerator, state: str,
              kept: int = 0) -> dict:
    if accelerator.total <= 0:
        return {}
    return {accelerator.resource_class: {
        'total': accelerator.total,
        'reserved': reserved(state, accelerator, accelerator.total, kept),
        'min_unit': 1,
        'max_unit': accelerator.total,
        'step_size': 1,
        'allocation_ratio': 1.0,
    }}


class ProviderTreeUpdater:
    """Adds, updates and removes the accelerator providers of one host."""

    def __init__(self, discoverer: discovery.Discoverer,
                 store: state_store.StateStore,
                 allocations_for: AllocationLookup,
                 auto_ready: bool = False,
                 aer: health.AerHealth | None = None,
                 one_time_use: Callable[[device_model.Accelerator], bool]
                 | None = None) -> None:
        """Report the devices ``discoverer`` finds, with ``store``.

        :param aer: evaluates the devices' PCIe AER counts each cycle;
            None: they are not evaluated here, but the effects the store
            records (the agent's) still put their trait on providers.
        """
        self.discoverer = discoverer
        self.store = store
        self.allocations_for = allocations_for
        self.auto_ready = auto_ready
        self.aer = aer
        #: Whether a device's freed units wait for the operator
        #: (``[cyborg_scrub] one_time_use``): its provider gets the trait.
        self.one_time_use = one_time_use or (lambda accelerator: False)
        # The problems last logged per accelerator: said once when they
        # change, not every cycle.
        self._problems_logged: dict[str, tuple[str, ...]] = {}

    def update(self, provider_tree, nodename: str,
               allocations: dict | None = None) -> None:
        """Bring ``provider_tree``'s accelerator children up to date.

        :param provider_tree: ``nova.compute.provider_tree.ProviderTree``,
            rooted at the compute node provider named ``nodename``.
        :param allocations: what Nova passes to ``update_provider_tree``
            on a reshape (consumer -> allocations); used instead of asking
            Placement when given.
        :raises sysfs.NoSysfs: there is no PCI bus to read; nothing in the
            tree was changed.
        """
        try:
            result = self.discoverer.discover()
        except Exception:
            # Nothing could be read: what the last cycle recorded may
            # not be so any more, so a guest build discovers for itself.
            self.store.clear_reported(nodename)
            raise
        found = result.by_address()
        initial = state_store.READY if self.auto_ready else (
            state_store.INACTIVE)
        states = self.store.sync(nodename, result.accelerators, initial)
        if self.aer is not None:
            try:
                states = self.aer.evaluate(nodename, result.accelerators,
                                           states)
            except Exception:
                # The providers are still reported, with the states and
                # effects recorded before; the next cycle evaluates again.
                LOG.exception('PCIe AER counts of %s not evaluated this '
                              'cycle', nodename)
        aer_effects = self.store.aer.effects(nodename)
        # What a guest build reads instead of discovering again.
        provider_devices.record(self.store, nodename, result.accelerators)
        kept = self.store.units.kept()
        prefix = nodename + NAME_INFIX
        root_uuid = provider_tree.data(nodename).uuid
        ours = {}
        for uuid in provider_tree.get_provider_uuids(nodename):
            data = provider_tree.data(uuid)
            if data.parent_uuid == root_uuid and data.name.startswith(
                    prefix):
                ours[uuid] = data
        for address, accelerator in sorted(found.items()):
            uuid = provider_uuid(nodename, address)
            if uuid not in ours:
                provider_tree.new_child(provider_name(nodename, address),
                                        root_uuid, uuid=uuid)
                LOG.info('Reporting accelerator %s (%s, %s x %d) as '
                         'provider %s', address, accelerator.driver,
                         accelerator.resource_class, accelerator.total,
                         uuid)
            self._log_problems(address, accelerator.problems)
            row = states[address]
            wanted = inventory(accelerator, row.state, kept.get(uuid, 0))
            current = provider_tree.data(uuid).inventory
            provider_tree.update_inventory(uuid, self._keep_used(
                uuid, address, current, wanted, allocations))
            self._sync_traits(provider_tree, nodename, uuid, row,
                              set(accelerator.traits) | {OWNER_TRAIT}
                              | health.traits(aer_effects.get(address))
                              | one_time_traits(
                                  self.one_time_use(accelerator)))
        for uuid, data in ours.items():
            address = data.name[len(prefix):]
            if address in found:
                continue
            if result.driver_errors or address in result.problems:
                # Not found because a driver or a read failed, not
                # because the device left: leave its provider alone.
                continue
            self._vanished(provider_tree, nodename, address, uuid, data,
                           states.get(address), allocations)
        self._update_remote(provider_tree, nodename, root_uuid,
                            result.accelerators, allocations, kept)

    def _log_problems(self, address: str, problems: tuple[str, ...]
                      ) -> None:
        if self._problems_logged.get(address, ()) == problems:
            return
        self._problems_logged[address] = problems
        if problems:
            LOG.warning('Accelerator %s is held back (fully reserved): %s',
                        address, '; '.join(problems))
        else:
            LOG.info('Accelerator %s has no problems any more', address)

    def _update_remote(self, provider_tree, nodename: str, root_uuid: str,
                       local, allocations: dict | None,
                       kept: dict[str, int]) -> None:
        """The devices of out-of-process drivers, as the agent recorded.

        The same providers as local devices (named with
        :data:`remote_devices.NAME_INFIX`), ``reserved`` from the same
        rule: a DOWN driver's devices are fenced, as the agent fenced
        them. A device its driver no longer reports is removed once
        nothing holds it, and fenced until then.
        """
        prefix = nodename + remote_devices.NAME_INFIX
        ours = {uuid: provider_tree.data(uuid)
                for uuid in provider_tree.get_provider_uuids(nodename)}
        ours = {uuid: data for uuid, data in ours.items()
                if data.parent_uuid == root_uuid
                and data.name.startswith(prefix)}
        found = remote_devices.by_provider(self.store, nodename, local)
        for uuid, device in sorted(found.items()):
            accelerator = device.accelerator
            if uuid not in ours:
                provider_tree.new_child(
                    remote_devices.provider_name(nodename, device.address),
                    root_uuid, uuid=uuid)
                LOG.info('Reporting accelerator %s of out-of-process '
                         'driver %s (%s x %d) as provider %s',
                         device.address, device.endpoint,
                         accelerator.resource_class, accelerator.total, uuid)
            current = provider_tree.data(uuid)
            provider_tree.update_inventory(uuid, self._keep_used(
                uuid, device.address, current.inventory,
                inventory(accelerator, device.state, kept.get(uuid, 0)),
                allocations))
            # Traits others added are kept; the device's are added.
            wanted = set(current.traits) | set(accelerator.traits) | {
                OWNER_TRAIT}
            if wanted != set(current.traits):
                provider_tree.update_traits(uuid, wanted)
        for uuid, data in ours.items():
            if uuid in found:
                continue
            usage = self._usage(uuid, allocations)
            if usage is not None and not any(usage.values()):
                LOG.info('Accelerator %s of an out-of-process driver is '
                         'gone and nothing holds it: removing provider %s',
                         data.name[len(prefix):], uuid)
                provider_tree.remove(uuid)
                continue
            fenced = fully_reserved(data.inventory)
            if fenced != data.inventory:
                provider_tree.update_inventory(uuid, fenced)

    def _keep_used(self, uuid: str, address: str, current: dict,
                   wanted: dict, allocations: dict | None) -> dict:
        """``wanted``, less any cut into what instances hold.

        Placement refuses to delete a resource class still allocated (and
        Nova then fails the whole update), and a total cut below usage
        would keep scheduling onto a device that has no room. So a class
        that shrinks or disappears under allocations keeps its used
        amount, fully reserved, until the allocations are gone. Usage is
        only looked up when something shrinks.
        """
        shrinking = [rc for rc, inv in current.items()
                     if inv['total'] > wanted.get(rc, {}).get('total', 0)]
        if not shrinking:
            return wanted
        usage = self._usage(uuid, allocations)
        result = dict(wanted)
        for rc in shrinking:
            used = (current[rc]['total'] if usage is None
                    else usage.get(rc, 0))
            new_total = wanted.get(rc, {}).get('total', 0)
            if used <= new_total:
                continue
            total = max(used, new_total)
            result[rc] = dict(current[rc], total=total, reserved=total,
                              max_unit=max(1, total))
            LOG.warning('Accelerator %s now offers %d %s but %s are in '
                        'use: keeping %d, fully reserved, until they are '
                        'freed', address, new_total, rc,
                        used if usage is not None else 'maybe all', total)
        return result

    def _sync_traits(self, provider_tree, nodename: str, uuid: str,
                     row: state_store.DeviceState, owned: set[str]) -> None:
        current = set(provider_tree.data(uuid).traits)
        # Drop what we set before and no longer report (e.g. the old
        # function of a reprogrammed FPGA); keep what others added.
        stale = set(row.owned_traits) - owned
        wanted = (current - stale) | owned
        if wanted != current:
            provider_tree.update_traits(uuid, wanted)
        # Remember a stale trait until the tree, as Placement holds it,
        # shows it gone: the write above can still lose a generation
        # conflict, and Nova then retries with a fresh tree.
        remembered = owned | (stale & current)
        if set(row.owned_traits) != remembered:
            self.store.set_owned_traits(nodename, row.address, remembered)

    def _vanished(self, provider_tree, nodename: str, address: str,
                  uuid: str, data, row: state_store.DeviceState | None,
                  allocations: dict | None) -> None:
        fenced = fully_reserved(data.inventory)
        if row is not None and not row.missing:
            # First update without it: fence now, decide next time. Had
            # it been removed at once, an allocation placed before the
            # fence reached Placement would make the delete fail.
            LOG.warning('Accelerator %s is not on the bus any more: '
                        'provider %s fenced', address, uuid)
            provider_tree.update_inventory(uuid, fenced)
            self.store.mark_missing(nodename, address)
            return
        usage = self._usage(uuid, allocations)
        if usage is not None and not any(usage.values()):
            LOG.info('Accelerator %s is gone and nothing holds it: '
                     'removing provider %s', address, uuid)
            provider_tree.remove(uuid)
            self.store.forget(nodename, address)
            self.store.aer.forget(nodename, [address])
            return
        # Gone while in use (or Placement cannot tell): keep the provider
        # so the allocations stay valid, but let nothing new land on it.
        if fenced != data.inventory:
            provider_tree.update_inventory(uuid, fenced)
        LOG.warning('Accelerator %s is gone but still in use (%s): keeping '
                    'provider %s fully reserved', address,
                    usage if usage is not None else 'Placement cannot say',
                    uuid)

    def _usage(self, uuid: str, allocations: dict | None
               ) -> dict[str, int] | None:
        """What is allocated on provider ``uuid``, by resource class."""
        used: dict[str, int] = {}
        if allocations is not None:
            holdings = [a.get('allocations', {}).get(uuid, {})
                        for a in allocations.values()]
        else:
            consumers = self.allocations_for(uuid)
            if consumers is None:
                return None
            holdings = list(consumers.values())
        for holding in holdings:
            for rc, amount in holding.get('resources', {}).items():
                used[rc] = used.get(rc, 0) + amount
        return used
