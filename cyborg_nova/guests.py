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

"""The unit books: a guest's units kept in step with its allocations.

Placement says how much of each provider a consumer holds; the unit
table (:mod:`cyborg_nova.assignments`) says which concrete units serve
it. :class:`UnitBooks` is every change to those books that a guest's
life brings, in one place for nova-compute (:mod:`cyborg_nova.virt.
guest`) and hot-plug (:mod:`cyborg_nova.hotplug.flow`):

- :meth:`UnitBooks.give`: a consumer's units made to match its
  allocations (missing units assigned and made, others freed);
- :meth:`UnitBooks.assign`: units of one device given, each recorded
  with how it goes into the guest (as its driver says:
  :func:`cyborg_nova.unit_work.hostdev_kind`), so that building the
  guest later reads no sysfs;
- :meth:`UnitBooks.move`, :meth:`UnitBooks.release`: the units follow
  an allocation Placement moved, or are freed;
- :meth:`UnitBooks.reconcile`: a provider's units against Placement's
  holders, with move links and the units libvirt domains still hold.

Units freed are retired by the injected per-unit work
(:class:`DriverWork` asks the device's driver to undo what it made,
e.g. a vGPU); with ``Assignments(hold_freed=True)`` they are also held
back for their scrub (:mod:`cyborg_nova.scrub`), which ``on_freed``
starts. What Nova knows (allocations, move links, the domains'
hostdevs) comes in as plain data and callables; a unit that cannot be
given raises :class:`UnitsUnavailable`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Callable, Iterable, Mapping, Protocol

from cyborg_drivers import device as device_model
from cyborg_nova import assignments
from cyborg_nova import provider_devices
from cyborg_nova import unit_work

LOG = logging.getLogger(__name__)

#: ``devices(providers)``: {provider uuid: device} of the providers
#: asked for (those without a device left out).
#: :raises Exception: the devices cannot be read.
DeviceLookup = Callable[[Iterable[str]],
                        Mapping[str, provider_devices.ProviderDevice]]


class UnitsUnavailable(Exception):
    """Units a consumer's allocation needs cannot be given; says why."""


class UnitWork(Protocol):
    """What a unit needs done when given, and when freed."""

    def prepare(self, accelerator: device_model.Accelerator,
                units: list[str]) -> list[str]:
        """Make ``units`` usable by a guest; the units made.

        :raises unit_work.UnitWorkError: a unit cannot be made.
        """

    def retire(self, units: list[str]) -> None:
        """Undo what :meth:`prepare` made of freed ``units``."""


class DriverWork:
    """The per-unit work of :mod:`cyborg_nova.unit_work`.

    :param sysfs_root: the sysfs root, asked on each use.
    :param ops: the privileged writes (:class:`unit_work.PrivsepOps`),
        asked on each use so a test can put a fake kernel's in.
    """

    def __init__(self, sysfs_root: Callable[[], str],
                 ops: Callable[[], object]) -> None:
        self._root = sysfs_root
        self._ops = ops

    def prepare(self, accelerator: device_model.Accelerator,
                units: list[str]) -> list[str]:
        return unit_work.prepare(self._root(), accelerator, units, self._ops())

    def retire(self, units: list[str]) -> None:
        if units:
            unit_work.retire(self._root(), units, self._ops())


class NoWork:
    """Units that need nothing done (hot-plugged PCI functions)."""

    def prepare(self, accelerator, units) -> list[str]:
        return []

    def retire(self, units) -> None:
        return None


@dataclasses.dataclass(frozen=True)
class Hostdev:
    """One unit a guest gets, and what it is there.

    ``kind`` is one of :data:`cyborg_drivers.device.HOSTDEV_KINDS`.
    """

    unit: str
    kind: str


class UnitBooks:
    """The unit table's rules for guests, with their per-unit work.

    :param units: the host's unit table.
    :param work: what a unit needs done when given and freed.
    :param on_freed: called after units were freed (and, with
        ``units.hold_freed``, held for their scrub), e.g. to start the
        scrub (:mod:`cyborg_nova.scrub`).
    """

    def __init__(self, units: assignments.Assignments,
                 work: UnitWork | None = None,
                 on_freed: Callable[[], object] | None = None) -> None:
        self.units = units
        self.work = work or NoWork()
        self.on_freed = on_freed
        # (provider, consumer, allocated, assigned) already logged short.
        self._short_logged: set[tuple] = set()

    # -- one device's units --------------------------------------------------

    def assign(self, consumer: str, device: provider_devices.ProviderDevice,
               count: int) -> list[str]:
        """Give ``consumer`` ``count`` units of ``device``; the units.

        Idempotent, see :meth:`assignments.Assignments.assign`.

        :raises assignments.NoFreeUnits: not enough free units.
        """
        accelerator = device.accelerator
        return self.units.assign(
            consumer, device.provider, accelerator.units, count,
            hostdev=lambda unit: unit_work.hostdev_kind(accelerator, unit))

    def units_of(self, consumers: Iterable[str], providers: Iterable[str]
                 ) -> list[str]:
        """Every unit ``consumers`` hold on ``providers``, sorted."""
        providers = list(providers)
        return sorted(u for c in set(consumers) for units in
                      self.units.of_consumer(c, providers).values()
                      for u in units)

    def providers_in_use(self, providers: Iterable[str]) -> list[str]:
        """Those of ``providers`` with a unit assigned here, sorted.

        Only they have rows for :meth:`reconcile` to bring in line:
        asking Placement about the others would cost a request each,
        every cycle, to change nothing.
        """
        wanted = set(providers)
        return sorted({row.provider for row in self.units.all()
                       if row.provider in wanted})

    def hostdevs(self, consumer: str, providers: Iterable[str],
                 devices: DeviceLookup | None = None) -> list[Hostdev]:
        """What ``consumer``'s units on ``providers`` are in its guest.

        Ordered by provider, then unit. Read from the unit table; a
        unit recorded before kinds were (an earlier release) is told
        from its device, through ``devices`` when given.
        """
        rows = sorted(self.units.rows_of_consumer(consumer, providers),
                      key=lambda r: (r.provider, r.unit))
        old = sorted({r.provider for r in rows
                      if r.hostdev not in device_model.HOSTDEV_KINDS})
        found: Mapping = {}
        if old and devices is not None:
            try:
                found = devices(old)
            except Exception as exc:
                LOG.warning('Devices of providers %s cannot be read: %s',
                            ', '.join(old), exc)
        return [Hostdev(r.unit, self._kind(r, found)) for r in rows]

    @staticmethod
    def _kind(row, found) -> str:
        if row.hostdev in device_model.HOSTDEV_KINDS:
            return row.hostdev
        device = found.get(row.provider)
        return unit_work.hostdev_kind(
            getattr(device, 'accelerator', None), row.unit)

    # -- a consumer's units made to match its allocations -------------------

    def give(self, consumer: str, allocations: Mapping[str, Mapping] | None,
             ours: Mapping[str, tuple[str, str]], devices: DeviceLookup,
             reconcile: Callable[[str], None] | None = None,
             strict: bool = True) -> None:
        """Make ``consumer``'s units on ``ours`` match ``allocations``.

        :param allocations: {provider: {'resources': ...}}; providers
            not in ``ours`` are ignored.
        :param ours: {provider uuid: (nodename, address)} of this host.
        :param devices: the devices behind providers.
        :param reconcile: called with a provider before units of it are
            assigned (see :meth:`reconcile`).
        :param strict: raise when a unit cannot be given; otherwise log
            it, and go on with the other providers.
        :raises UnitsUnavailable: with ``strict``: no free unit, the
            devices cannot be read or one is gone, or a unit cannot be
            made (:meth:`UnitWork.prepare`).
        """
        wanted = {rp: alloc.get('resources', {})
                  for rp, alloc in (allocations or {}).items()
                  if rp in ours and any(alloc.get('resources', {}).values())}
        held = self.units.of_consumer(consumer, ours)
        for rp in sorted(set(held) - set(wanted)):
            self.units.release(consumer, rp)
            LOG.info('Instance %s no longer holds accelerator %s: released '
                     '%s', consumer, ours[rp][1], ', '.join(held[rp]))
            self._freed(held[rp])
        if not wanted:
            # An ordinary flavor never reads the accelerators: a host
            # whose devices cannot be read still builds it.
            return
        try:
            found = devices(sorted(wanted))
        except Exception as exc:
            return _unavailable(strict, consumer, 'cannot read the '
                                'accelerators of this host: %s' % exc)
        for rp, resources in sorted(wanted.items()):
            address = ours[rp][1]
            device = found.get(rp)
            if device is None:
                _unavailable(strict, consumer, 'accelerator %s (provider '
                             '%s) is allocated but not on the bus'
                             % (address, rp))
                continue
            count = resources.get(device.accelerator.resource_class, 0)
            if not count:
                continue
            if reconcile is not None:
                reconcile(rp)
            try:
                units = self.assign(consumer, device, count)
            except assignments.NoFreeUnits as exc:
                _unavailable(strict, consumer, str(exc))
                continue
            extra = self.units.trim(consumer, rp, count)
            if extra:
                LOG.info('Instance %s now holds %d of accelerator %s: '
                         'released %s', consumer, count, address,
                         ', '.join(extra))
                self._freed(extra)
            try:
                made = self.work.prepare(device.accelerator, units[:count])
            except unit_work.UnitWorkError as exc:
                _unavailable(strict, consumer, 'accelerator %s: %s'
                             % (address, exc))
                continue
            if made:
                LOG.info('Instance %s: vGPU units made on accelerator %s: '
                         '%s', consumer, address, ', '.join(made))
            LOG.info('Instance %s gets %s of accelerator %s', consumer,
                     ', '.join(units), address)

    def _freed(self, units: list[str]) -> None:
        """Undo what was made of freed ``units``; then :attr:`on_freed`."""
        self.work.retire(units)
        if units and self.on_freed is not None:
            self.on_freed()

    # -- allocations Placement moved or freed -------------------------------

    def release(self, consumer: str, providers: Iterable[str],
                why: str = '') -> int:
        """Free what ``consumer`` holds on ``providers``; how many.

        :param why: when given, a release that frees anything is logged
            with it.
        """
        providers = list(providers)
        held = self.units.of_consumer(consumer, providers)
        freed = self.units.release(consumer, providers=providers)
        self._freed([u for units in held.values() for u in units])
        if freed and why:
            LOG.info('Consumer %s released %d accelerator unit(s): %s',
                     consumer, freed, why)
        return freed

    def move(self, source: str, dest: str, providers: Iterable[str],
             why: str = '') -> int:
        """The units follow an allocation Placement moved; how many.

        :param why: when given, a move of anything is logged with it.
        """
        providers = list(providers)
        before = self.units.of_consumer(dest, providers)
        moved = self.units.move(source, dest, providers)
        kept = {u for units in self.units.of_consumer(
            dest, providers).values() for u in units}
        self._freed([u for units in before.values() for u in units
                     if u not in kept])
        if moved and why:
            LOG.info('%d accelerator unit(s) of consumer %s now held by '
                     '%s: %s', moved, source, dest, why)
        return moved

    def reconcile(self, provider: str,
                  holders_of: Callable[[str], dict[str, int] | None],
                  links: assignments.LinkLookup | None,
                  in_domains: assignments.DomainLookup | None) -> None:
        """Bring ``provider``'s units in line with Placement; log it.

        :param holders_of: {consumer: amount} on a provider as Placement
            has it; None when it cannot say, and then every unit is kept
            (rather than free one a guest may be using).
        See :meth:`assignments.Assignments.reconcile` for the rules.
        """
        # Rows assigned after the read started are left alone.
        read_at = time.time()
        holders = holders_of(provider)
        if holders is None:
            return
        result = self.units.reconcile(provider, holders, read_at, links,
                                      in_domains)
        for source, dest, units in result.moved:
            LOG.info('Units %s of provider %s follow the allocation from '
                     'consumer %s to %s', ', '.join(units), provider, source,
                     dest)
        for consumer, units in result.released.items():
            LOG.info('Consumer %s holds nothing on provider %s any more: '
                     'released %s', consumer, provider, ', '.join(units))
            self._freed(units)
        for consumer, kept in result.kept.items():
            LOG.warning('Consumer %s holds nothing on provider %s in '
                        'Placement any more, but domain(s) %s still have '
                        '%s as hostdevs: kept, and reserved, until the '
                        'domain is gone', consumer, provider,
                        ', '.join(sorted(set(kept.values()))),
                        ', '.join(sorted(kept)))
        for consumer, (amount, have) in result.short.items():
            if (provider, consumer, amount, have) not in self._short_logged:
                self._short_logged.add((provider, consumer, amount, have))
                LOG.warning('Consumer %s holds %d unit(s) of provider %s '
                            'in Placement but %d are assigned here; they '
                            'are assigned at its next guest build',
                            consumer, amount, provider, have)


def _unavailable(strict: bool, consumer: str, reason: str) -> None:
    if strict:
        raise UnitsUnavailable(reason)
    # The guest still gets every unit recorded for it, a vGPU unit that
    # could not be made included: it does not go without the
    # accelerator, it gets what is recorded, as it is.
    LOG.error('cyborg-nova: instance %s: accelerator units could not be '
              'given: %s; the guest is defined with the units recorded for '
              'it here, as they are', consumer, reason)
