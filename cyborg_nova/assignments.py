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

"""Which concrete units (PCI functions) serve which Placement allocation.

Placement allocates amounts ("2 CUSTOM_QAT from this PF's provider" to a
consumer); a guest needs concrete functions ("VFs 0000:3b:00.1 and .2").
Placement is the truth of who holds what; this table only remembers
which functions serve each allocation, keyed exactly as Placement keys
the allocation: by provider uuid and consumer uuid (an instance, or a
migration record while Nova moves an instance). The host's nodename
plays no part (it is in the provider uuid already, and during an
evacuation ``instance.node`` still names the source).

``(provider, unit)`` is the table's key: two consumers can never be
given the same function, whichever process or thread assigns them.
Nova moves allocations between consumers (to the migration record when a
resize starts, back to the instance on revert); :meth:`Assignments.move`
mirrors such a move, and :meth:`Assignments.reconcile` brings a
provider's rows back in line with the allocations Placement holds.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Callable, Iterable, Mapping

from cyborg_nova import store as state_store
# A row of the unit table; callers know it as assignments.Assignment.
from cyborg_nova.store.units import Assignment

LOG = logging.getLogger(__name__)


class NoFreeUnits(Exception):
    """The provider has fewer free units than the allocation asks for."""


@dataclasses.dataclass(frozen=True)
class Link:
    """What Nova knows of a consumer that is part of a move.

    ``instance`` is the instance the migration record ``migration``
    moves; ``status`` is the migration's status (``confirmed``,
    ``reverted``, ...).
    """

    migration: str
    instance: str
    status: str


#: ``links(consumer)``: the :class:`Link` of the move ``consumer`` (an
#: instance or a migration uuid) takes part in, or None.
LinkLookup = Callable[[str], 'Link | None']

#: ``in_domains()``: {unit: libvirt domain uuid} of every unit a domain on
#: the host has as a hostdev, running or only defined; None when libvirt
#: cannot say.
DomainLookup = Callable[[], 'Mapping[str, str] | None']

#: Migration statuses after which the allocation the migration record
#: held went back to the instance.
REVERTED = ('reverting', 'reverted')


@dataclasses.dataclass
class Reconciled:
    """What :meth:`Assignments.reconcile` did to one provider's rows."""

    released: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    moved: list[tuple[str, str, list[str]]] = dataclasses.field(
        default_factory=list)
    #: consumer -> (allocated amount, units recorded)
    short: dict[str, tuple[int, int]] = dataclasses.field(
        default_factory=dict)
    #: consumer -> {unit: domain}: units of a consumer without an
    #: allocation that a domain still holds, kept (newly kept ones only).
    kept: dict[str, dict[str, str]] = dataclasses.field(
        default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.released or self.moved or self.kept)


class Assignments:
    """Assignments kept in the host's state store.

    :param hold_freed: every unit freed here is held back, scrubbing, in
        the transaction that frees it (see :mod:`cyborg_nova.scrub`):
        no other consumer can be given it until its scrub lifts the
        hold.
    """

    def __init__(self, store: state_store.StateStore,
                 hold_freed: bool = False) -> None:
        self.store = store
        self._units = store.units
        self.hold_freed = hold_freed

    def all(self) -> list[Assignment]:
        """Every row, ordered by provider and unit."""
        return self._units.all()

    def of_consumer(self, consumer: str,
                    providers: Iterable[str] | None = None
                    ) -> dict[str, list[str]]:
        """{provider uuid: [units]} held by ``consumer``, units sorted.

        :param providers: only these providers (e.g. those of the
            nodes this driver serves); all when None.
        """
        wanted = None if providers is None else set(providers)
        held: dict[str, list[str]] = {}
        for row in self._units.of_consumer(consumer):
            if wanted is None or row.provider in wanted:
                held.setdefault(row.provider, []).append(row.unit)
        return held

    def rows_of_consumer(self, consumer: str,
                         providers: Iterable[str] | None = None
                         ) -> list[Assignment]:
        """``consumer``'s rows (on ``providers`` only, if given)."""
        wanted = None if providers is None else set(providers)
        return [row for row in self._units.of_consumer(consumer)
                if wanted is None or row.provider in wanted]

    def of_provider(self, provider: str) -> list[Assignment]:
        return self._units.of_provider(provider)

    def assign(self, consumer: str, provider: str,
               candidates: Iterable[str], count: int,
               hostdev: Callable[[str], str] | None = None) -> list[str]:
        """Give ``consumer`` ``count`` units of ``provider``; the units.

        Idempotent: units the consumer already holds on the provider are
        kept (and returned first), so calling it again at every guest
        build changes nothing. New units are the first free ones in
        ``candidates`` order, which makes the choice deterministic.
        Units the consumer holds beyond ``count`` stay recorded (a guest
        may still use them); :meth:`trim` drops them.

        :param hostdev: what a unit is in the guest, recorded with each
            unit given (and with units held from an earlier release,
            which have none).

        :raises NoFreeUnits: not enough free units; nothing is assigned.
        """
        candidates = list(candidates)
        if not candidates:
            raise NoFreeUnits('provider %s has no units' % provider)
        # One transaction: the units seen free are still free when taken.
        with self._units.change() as table:
            taken = table.holders(provider)
            mine = sorted(u for u, c in taken.items() if c == consumer)
            if hostdev is not None and mine:
                table.fill_hostdevs(provider, {u: hostdev(u) for u in mine})
            if len(mine) >= count:
                return mine[:count]
            held = table.held(provider)
            free = [u for u in candidates
                    if u not in taken and u not in held]
            need = count - len(mine)
            if len(free) < need:
                raise NoFreeUnits(
                    '%d unit(s) of provider %s asked for %s, %d free%s'
                    % (count, provider, consumer, len(free) + len(mine),
                       ' (%d held back until scrubbed or marked ready)'
                       % len(held) if held else ''))
            new = free[:need]
            table.add(provider, consumer, new, time.time(),
                      {u: hostdev(u) for u in new} if hostdev else None)
        return mine + new

    def trim(self, consumer: str, provider: str, count: int) -> list[str]:
        """Keep the first ``count`` units of ``consumer``; the dropped."""
        held = self.of_consumer(consumer, [provider]).get(provider, [])
        extra = held[count:]
        if extra:
            with self._units.change() as table:
                table.remove(consumer, [provider], units=extra,
                             hold=self.hold_freed)
        return extra

    def release(self, consumer: str, provider: str | None = None,
                providers: Iterable[str] | None = None,
                created_before: float | None = None) -> int:
        """Free what ``consumer`` holds; how many units were freed.

        :param provider: only on this provider.
        :param providers: only on these providers.
        :param created_before: only units assigned before this time, so
            a decision taken on an older read of Placement never frees a
            unit assigned since.
        """
        only = [provider] if provider is not None else (
            None if providers is None else list(providers))
        if only == []:
            return 0
        with self._units.change() as table:
            return table.remove(consumer, only,
                                created_before=created_before,
                                hold=self.hold_freed)

    def move(self, source: str, dest: str,
             providers: Iterable[str] | None = None) -> int:
        """Mirror Placement moving ``source``'s allocation to ``dest``.

        As Nova's ``move_allocations`` replaces what ``dest`` held with
        what ``source`` held, on every provider where ``source`` has
        units ``dest``'s own units are freed and ``source``'s become
        ``dest``'s. How many units moved.
        """
        held = self.of_consumer(source, providers)
        if not held:
            return 0
        moved = 0
        with self._units.change() as table:
            for provider in held:
                table.remove(dest, [provider], hold=self.hold_freed)
                moved += table.reassign(provider, source, dest)
        return moved

    def reconcile(self, provider: str, holders: dict[str, int],
                  read_at: float, links: LinkLookup | None = None,
                  in_domains: DomainLookup | None = None) -> Reconciled:
        """Bring ``provider``'s rows in line with Placement.

        :param holders: {consumer: amount} allocated on the provider, as
            read from Placement.
        :param read_at: when that read started; rows assigned since are
            left alone (their allocation may be newer than the read).
        :param links: tells which consumers are two sides of one move.
        :param in_domains: the units the host's libvirt domains hold;
            asked only when a consumer has units but no allocation.

        A consumer with units but no allocation either moved (Placement
        gave its allocation to the other side of a migration, which
        holds the provider but has no units yet: the units follow it) or
        is gone. A gone consumer's units are freed, except those a
        domain on the host still has as hostdevs (its allocation was
        deleted by hand, or by Nova's API while it took the compute for
        down): handing those out would give one function to two guests,
        so they stay assigned, marked ``kept_for`` that domain (which
        reserves them in Placement), until the domain is gone; without
        ``in_domains``, or when libvirt cannot say, nothing of a gone
        consumer is freed. A consumer with fewer units than its
        allocation is reported in ``short``; it is given its units at
        its next guest build.
        """
        result = Reconciled()
        every = self.of_provider(provider)
        rows = [a for a in every if a.created_at < read_at]
        counts: dict[str, int] = {}
        for row in every:
            counts[row.consumer] = counts.get(row.consumer, 0) + 1
        # Rows that serve an allocation again are no longer kept.
        served = {a.unit: None for a in rows
                  if a.kept_for is not None and a.consumer in holders}
        if served:
            with self._units.change() as table:
                table.keep(provider, served)
        orphans = sorted({a.consumer for a in rows} - set(holders))
        domains: Mapping[str, str] | None = None
        for consumer in orphans:
            heir = self._heir(consumer, holders, counts, links)
            units = [a for a in rows if a.consumer == consumer]
            if heir is not None:
                self.move(consumer, heir, [provider])
                counts[heir] = counts.pop(consumer, 0)
                result.moved.append((consumer, heir,
                                     [a.unit for a in units]))
                continue
            if domains is None:
                domains = in_domains() if in_domains is not None else None
                if domains is None:
                    LOG.warning('Consumer(s) %s hold nothing of provider '
                                '%s in Placement, but which units the '
                                "host's guests use cannot be told: their "
                                'units are kept this cycle',
                                ', '.join(orphans), provider)
                    return result
            busy = {a.unit: domains[a.unit] for a in units
                    if a.unit in domains}
            free = [a.unit for a in units if a.unit not in busy]
            marked = {(a.unit, a.kept_for) for a in units}
            fresh = {u: d for u, d in busy.items() if (u, d) not in marked}
            if fresh:
                with self._units.change() as table:
                    table.keep(provider, fresh)
                result.kept[consumer] = fresh
            if free:
                with self._units.change() as table:
                    table.remove(consumer, [provider], units=free,
                                 created_before=read_at,
                                 hold=self.hold_freed)
                result.released[consumer] = free
            counts[consumer] = len(busy)
            if not busy:
                counts.pop(consumer, None)
        for consumer, amount in sorted(holders.items()):
            have = counts.get(consumer, 0)
            if have < amount:
                result.short[consumer] = (amount, have)
        return result

    @staticmethod
    def _heir(consumer: str, holders: dict[str, int],
              counts: dict[str, int], links: LinkLookup | None
              ) -> str | None:
        """The consumer Placement moved ``consumer``'s allocation to."""
        if links is None:
            return None
        link = links(consumer)
        if link is None:
            return None
        if consumer == link.instance:
            # A move started: the migration record now holds what the
            # instance held here (the instance may hold a new allocation
            # of its own on a same-host resize, served by other units).
            heir = link.migration
            return heir if heir in holders and not counts.get(heir) else (
                None)
        if link.instance in holders and (
                link.status in REVERTED or not counts.get(link.instance)):
            # Reverted (or a move rolled back): the instance holds the
            # migration's allocation again, and its units with it. An
            # instance holding units of its own after a confirmed
            # same-host resize keeps those; the migration's are freed.
            return link.instance
        return None
