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

"""The PCIe AER tables: each function's counts, each device's effect.

``aer_counters`` keeps, per PCI function of a device and AER severity,
the count the operator last acknowledged (the baseline), the count that
started the current rate window and the last count read;
``aer_effects`` the effect a device's counts took, until the operator
clears it. :mod:`cyborg_nova.health` gives them their meaning.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Collection, Iterable, Mapping

from cyborg_nova.store import database

NONE = 'none'
INFORM = 'inform'
FENCE = 'fence'
#: The effects, weakest first: an effect is only ever raised to a
#: stronger one until it is cleared.
EFFECTS = (NONE, INFORM, FENCE)

#: ``{(function, severity): count}``: the counts of one device read now.
Counts = Mapping[tuple[str, str], int]

_SELECT_COUNTERS = (
    'SELECT device, function, severity, baseline, baseline_at, window, '
    'window_at, last, last_at FROM aer_counters WHERE nodename = ?')
_PUT_COUNTER = (
    'INSERT OR REPLACE INTO aer_counters (nodename, device, function, '
    'severity, baseline, baseline_at, window, window_at, last, last_at) '
    'VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)')
_SELECT_EFFECTS = (
    'SELECT device, effect, reason, notified, since, updated_at '
    'FROM aer_effects WHERE nodename = ?')


@dataclasses.dataclass(frozen=True)
class Counter:
    """One severity of one PCI function of a device.

    ``baseline_at`` 0 means the baseline is the kernel's own start (0
    errors when the function was added): nothing was acknowledged yet.
    """

    device: str
    function: str
    severity: str
    baseline: int
    baseline_at: float
    window: int
    window_at: float
    last: int
    last_at: float

    @property
    def key(self) -> tuple[str, str]:
        return self.function, self.severity


@dataclasses.dataclass(frozen=True)
class Effect:
    """The effect a device's AER counts took, and what was notified."""

    device: str
    effect: str
    reason: str
    #: The strongest effect a notification was sent for (``none``: not
    #: yet).
    notified: str
    since: float
    updated_at: float


def stronger(effect: str, than: str) -> bool:
    """Whether ``effect`` is stronger than ``than`` (see :data:`EFFECTS`)."""
    return EFFECTS.index(effect) > EFFECTS.index(than)


class AerTable:
    """The ``aer_counters`` and ``aer_effects`` tables of ``store``."""

    def __init__(self, store: database.Database) -> None:
        self._store = store

    # -- counters ----------------------------------------------------------

    def counters(self, nodename: str) -> dict[str, list[Counter]]:
        """{device: its rows} of ``nodename``, by function and severity."""
        with self._store._connect() as db:
            rows = db.execute(
                _SELECT_COUNTERS + ' ORDER BY device, function, severity',
                (nodename,)).fetchall()
        found: dict[str, list[Counter]] = {}
        for row in rows:
            found.setdefault(row[0], []).append(Counter(*row))
        return found

    def record(self, nodename: str, reads: Mapping[str, Counts],
               functions: Mapping[str, Collection[str]], now: float,
               from_zero: Collection[str], window: float
               ) -> dict[str, list[Counter]]:
        """Record the counts read now; {device: rows as compared}.

        A (function, severity) not seen before gets its first row: its
        baseline is 0 for a severity in ``from_zero`` (every error the
        kernel counted since it added the function counts), else the
        count read (only errors from now on count). So does one whose
        count went down: the kernel counted again from 0 (a reboot, a
        function removed and added again). The returned rows hold the
        count read as ``last`` and the window it is to be compared with;
        a window ``window`` seconds old or more is then started again
        from the count read. Rows of functions no longer in a device's
        ``functions`` are dropped. Writes nothing when no count changed
        and no window ends.

        :param reads: {device: {(function, severity): count}}.
        :param functions: {device: every PCI function it has now}.
        """
        known = self.counters(nodename)
        result: dict[str, list[Counter]] = {}
        inserts: list[Counter] = []
        updates: list[tuple] = []
        drops: list[tuple[str, str]] = []
        for device, counts in reads.items():
            rows = {r.key: r for r in known.get(device, ())}
            compared = []
            for (function, severity), count in sorted(counts.items()):
                row = rows.get((function, severity))
                if row is None or count < row.last:
                    zero = severity in from_zero
                    row = Counter(device, function, severity,
                                  0 if zero else count, 0.0 if zero else now,
                                  count, now, count, now)
                    inserts.append(row)
                    compared.append(row)
                    continue
                compared.append(dataclasses.replace(row, last=count,
                                                    last_at=now))
                ends = now - row.window_at >= window
                if ends or count != row.last:
                    updates.append((
                        row.window_at, count if ends else row.window,
                        row.window_at, now if ends else row.window_at,
                        count, now, nodename, device, function, severity))
            result[device] = compared
            have = set(functions.get(device, ()))
            drops += sorted({(device, r.function) for r in rows.values()
                             if r.function not in have})
        if inserts or updates or drops:
            with self._store._transaction() as db:
                db.executemany(_PUT_COUNTER, [
                    (nodename, *dataclasses.astuple(r)) for r in inserts])
                # The window only if it is still the one read above: an
                # acknowledge in between started a new one, kept.
                db.executemany(
                    'UPDATE aer_counters SET '
                    'window = CASE WHEN window_at = ? THEN ? ELSE window END, '
                    'window_at = CASE WHEN window_at = ? THEN ? '
                    'ELSE window_at END, last = ?, last_at = ? '
                    'WHERE nodename = ? AND device = ? AND function = ? '
                    'AND severity = ?', updates)
                db.executemany(
                    'DELETE FROM aer_counters WHERE nodename = ? AND '
                    'device = ? AND function = ?',
                    [(nodename, d, f) for d, f in drops])
        return result

    def acknowledge(self, nodename: str, device: str, counts: Counts,
                    now: float | None = None) -> None:
        """Make the device's counts now its baseline; clear its effect.

        ``counts`` are the counts read now; a (function, severity) of the
        device that could not be read takes its last count as baseline.
        The rate windows start again from the baseline.
        """
        now = time.time() if now is None else now
        with self._store._transaction() as db:
            db.execute(
                'UPDATE aer_counters SET baseline = last, baseline_at = ?, '
                'window = last, window_at = ? WHERE nodename = ? AND '
                'device = ?', (now, now, nodename, device))
            db.executemany(_PUT_COUNTER, [
                (nodename, device, function, severity, count, now, count,
                 now, count, now)
                for (function, severity), count in sorted(counts.items())])
            db.execute('DELETE FROM aer_effects WHERE nodename = ? AND '
                       'device = ?', (nodename, device))

    # -- effects -----------------------------------------------------------

    def effects(self, nodename: str) -> dict[str, Effect]:
        """{device: its effect} of ``nodename``'s devices that have one."""
        with self._store._connect() as db:
            rows = db.execute(_SELECT_EFFECTS, (nodename,)).fetchall()
        return {r[0]: Effect(*r) for r in rows}

    def raise_effect(self, nodename: str, device: str, effect: str,
                     reason: str, now: float | None = None) -> Effect:
        """The device's effect, raised to ``effect`` if that is stronger.

        A device without one gets ``effect`` with ``reason``; a weaker or
        equal effect leaves the one recorded (and its reason) as it is.

        :raises ValueError: ``effect`` is not one of :data:`EFFECTS`, or
            is ``none``.
        """
        if effect not in EFFECTS or effect == NONE:
            raise ValueError('not an effect to record: %r' % effect)
        now = time.time() if now is None else now
        with self._store._transaction() as db:
            row = db.execute(_SELECT_EFFECTS + ' AND device = ?',
                             (nodename, device)).fetchone()
            if row is None:
                db.execute(
                    'INSERT INTO aer_effects (nodename, device, effect, '
                    'reason, notified, since, updated_at) VALUES '
                    '(?, ?, ?, ?, ?, ?, ?)',
                    (nodename, device, effect, reason, NONE, now, now))
                return Effect(device, effect, reason, NONE, now, now)
            current = Effect(*row)
            if not stronger(effect, current.effect):
                return current
            db.execute(
                'UPDATE aer_effects SET effect = ?, reason = ?, '
                'updated_at = ? WHERE nodename = ? AND device = ?',
                (effect, reason, now, nodename, device))
            return dataclasses.replace(current, effect=effect, reason=reason,
                                       updated_at=now)

    def claim_notification(self, nodename: str, device: str,
                           effect: str) -> bool:
        """Whether the caller is the one to notify ``effect`` of ``device``.

        True once per effect (and device), to whichever process asks
        first: nova-compute and the agent both evaluate the counters.
        """
        with self._store._transaction() as db:
            cursor = db.execute(
                'UPDATE aer_effects SET notified = effect WHERE nodename = '
                '? AND device = ? AND effect = ? AND notified != effect',
                (nodename, device, effect))
            return cursor.rowcount == 1

    def forget(self, nodename: str, devices: Iterable[str]) -> None:
        """Drop the rows of ``devices`` (their providers are gone)."""
        rows = [(nodename, d) for d in devices]
        with self._store._transaction() as db:
            db.executemany('DELETE FROM aer_counters WHERE nodename = ? '
                           'AND device = ?', rows)
            db.executemany('DELETE FROM aer_effects WHERE nodename = ? '
                           'AND device = ?', rows)
