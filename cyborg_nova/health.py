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

"""PCIe AER health: what an accelerator's error counts do to it.

Discovery reads the AER counters of every PCI function of an accelerator
(:mod:`cyborg_drivers.aer`); :class:`AerHealth` compares them with the
state store's record (:mod:`cyborg_nova.store.health`) each time
nova-compute's update cycle or the agent discovers:

- a fatal count above the baseline (what the operator last acknowledged;
  0 until then) fences the device: it is set ``unhealthy``, so its
  provider is fully reserved by the rule every writer of ``reserved``
  follows (:func:`cyborg_nova.providers.reserved`);
- a non-fatal or correctable count that grew by more than its hourly
  rate within the current window takes the configured effect
  (``[cyborg_aer] nonfatal_effect``, ``correctable_effect``): ``none``,
  ``inform`` (the :data:`TRAIT` on the provider) or ``fence``.

An effect, once taken, stays (a device fenced for AER errors is kept
``unhealthy`` even if something else sets it ``ready``) until the
operator clears it: :func:`acknowledge`, called by ``cyborg-nova
device-set-state <address> ready``, makes the counts read then the new
baseline. Each effect is notified once (``accelerator.aer_error``), by
whichever process has a notifier and sees it first.

Counters that cannot be read (a function without the AER capability)
take no effect and count as unknown, never as 0.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Callable, Iterable

from oslo_config import cfg

from cyborg_drivers import aer
from cyborg_drivers import device as device_model
from cyborg_nova import notifications
from cyborg_nova import store as state_store
from cyborg_nova.store import health as health_table

LOG = logging.getLogger(__name__)

#: The informational trait of a provider whose device's AER counts took
#: an effect (``inform``, and ``fence`` too, to say why it is fenced).
TRAIT = 'CUSTOM_PCIE_AER_ERRORS'
#: The notification event (``accelerator.aer_error``).
EVENT = 'aer_error'

NONE = health_table.NONE
INFORM = health_table.INFORM
FENCE = health_table.FENCE
EFFECTS = health_table.EFFECTS

#: Errors the kernel counted before the first read count too: a fatal
#: error since boot is never harmless. Boot and probing often leave
#: non-fatal and correctable counts (an unsupported request, a receiver
#: error while the link trains), so those count from the first read.
FROM_ZERO = frozenset({aer.FATAL})
#: Seconds of one rate window.
WINDOW = 3600.0

_WORDS = {aer.FATAL: 'fatal', aer.NONFATAL: 'non-fatal',
          aer.CORRECTABLE: 'correctable'}


@dataclasses.dataclass(frozen=True)
class Policy:
    """What the counts do: the ``[cyborg_aer]`` options."""

    enabled: bool = True
    nonfatal_effect: str = INFORM
    nonfatal_per_hour: int = 0
    correctable_effect: str = INFORM
    correctable_per_hour: int = 100

    def __post_init__(self) -> None:
        for effect in (self.nonfatal_effect, self.correctable_effect):
            if effect not in EFFECTS:
                raise ValueError('unknown AER effect %r; effects are %s'
                                 % (effect, ', '.join(EFFECTS)))

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> Policy:
        """The policy of ``conf``'s ``[cyborg_aer]`` group (registered)."""
        opts = conf.cyborg_aer
        return cls(opts.enabled, opts.nonfatal_effect,
                   opts.nonfatal_per_hour, opts.correctable_effect,
                   opts.correctable_per_hour)

    def rule(self, severity: str) -> tuple[str, int]:
        """(effect, errors allowed an hour) of a non-fatal ``severity``."""
        if severity == aer.NONFATAL:
            return self.nonfatal_effect, self.nonfatal_per_hour
        return self.correctable_effect, self.correctable_per_hour


@dataclasses.dataclass(frozen=True)
class Cause:
    """One function's count that takes an effect, and why."""

    function: str
    severity: str
    effect: str
    message: str


def _when(at: float) -> str:
    if not at:
        return 'the kernel began counting'
    return time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(at))


def _minutes(seconds: float) -> str:
    minutes = max(seconds, 0) / 60
    return ('%d min' % round(minutes) if minutes < 120
            else '%.1f h' % (minutes / 60))


def causes(policy: Policy, rows: Iterable[health_table.Counter],
           now: float, ports: Iterable[str] = ()) -> list[Cause]:
    """The counts in ``rows`` that take an effect under ``policy``.

    ``rows`` are as :meth:`~cyborg_nova.store.health.AerTable.record`
    returns them: ``last`` is the count just read. ``ports``: the
    functions among them that are the PCIe port above the device (its
    link's errors), named so in the messages.
    """
    ports = set(ports)
    found = []
    for row in rows:
        word = _WORDS.get(row.severity)
        if word is None:
            continue
        name = row.function + (' (the PCIe port above the device)'
                               if row.function in ports else '')
        if row.severity == aer.FATAL:
            if row.last > row.baseline:
                found.append(Cause(
                    row.function, row.severity, FENCE,
                    'PCIe AER: %d fatal error(s) on %s since %s' % (
                        row.last - row.baseline, name,
                        _when(row.baseline_at))))
            continue
        effect, per_hour = policy.rule(row.severity)
        grown = row.last - row.window
        elapsed = now - row.window_at
        # A window read late (nothing read for hours) allows the rate
        # over its whole length, not one hour's worth.
        allowed = per_hour * max(elapsed, WINDOW) / WINDOW
        if effect != NONE and grown > allowed:
            found.append(Cause(
                row.function, row.severity, effect,
                'PCIe AER: %d %s error(s) on %s in %s, more than %d an '
                'hour' % (grown, word, name, _minutes(elapsed),
                          per_hour)))
    return found


def counts_of(accelerator: device_model.Accelerator
              ) -> dict[tuple[str, str], int]:
    """{(function, severity): count} of the counters that were read."""
    return _counts(accelerator.aer)


def _counts(counters: Iterable[aer.AerCounters]
            ) -> dict[tuple[str, str], int]:
    return {(c.address, severity): c.total(severity)
            for c in counters for severity in aer.SEVERITIES
            if c.total(severity) is not None}


def functions_of(accelerator: device_model.Accelerator) -> list[str]:
    """Every PCI function whose counters discovery tried to read."""
    return [c.address for c in accelerator.aer]


def traits(effect: health_table.Effect | None) -> set[str]:
    """The traits a device's AER effect puts on its provider."""
    if effect is None or effect.effect == NONE:
        return set()
    return {TRAIT}


class AerHealth:
    """Evaluates the AER counts of a host's accelerators.

    :param store: the host's state store.
    :param policy: what the counts do (:meth:`Policy.from_conf`).
    :param notifier: sends ``accelerator.aer_error``; None (or one with
        no driver configured): the notification is left to a process
        that has one.
    :param clock: seconds since the epoch (tests pass their own).
    """

    def __init__(self, store: state_store.StateStore, policy: Policy,
                 notifier: notifications.Notifier | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.policy = policy
        self.notifier = notifier
        self.clock = clock

    def evaluate(self, nodename: str,
                 accelerators: Iterable[device_model.Accelerator],
                 rows: dict[str, state_store.DeviceState]
                 ) -> dict[str, state_store.DeviceState]:
        """Record the counts of ``accelerators``; take their effects.

        :param rows: the devices' rows in the store (what its ``sync``
            returned).
        :returns: ``rows``, read again if a device was set ``unhealthy``.
        """
        local = [a for a in accelerators if a.aer and not a.remote]
        now = self.clock()
        compared = self.store.aer.record(
            nodename, {a.address: counts_of(a) for a in local},
            {a.address: functions_of(a) for a in local}, now, FROM_ZERO,
            WINDOW)
        effects = self.store.aer.effects(nodename)
        fenced = False
        for accelerator in local:
            address = accelerator.address
            effect = effects.get(address)
            if self.policy.enabled:
                found = causes(self.policy, compared.get(address, ()), now,
                               [c.address for c in accelerator.aer
                                if c.upstream_port])
                strongest = max((c.effect for c in found),
                                key=EFFECTS.index, default=NONE)
                if effect is None or health_table.stronger(
                        strongest, effect.effect):
                    effect = self._raise(nodename, address, strongest,
                                         found, now) or effect
            if effect is not None:
                fenced |= self._take(nodename, accelerator, effect, rows)
        return self.store.devices(nodename) if fenced else rows

    def recovery_failed(self, nodename: str,
                        accelerator: device_model.Accelerator,
                        function: str,
                        rows: dict[str, state_store.DeviceState]
                        ) -> dict[str, state_store.DeviceState]:
        """Fence ``accelerator``: the kernel failed to recover ``function``.

        The kernel's PCIe error recovery sends ``ERROR_EVENT=
        FAILED_RECOVERY`` when the drivers could not bring the function
        back; it stays unusable until it is reset or replaced, whether or
        not a counter of it grew (a device without AER, an error the port
        above reported). Recorded as a ``fence`` effect, as a fatal
        error is, until the operator clears it. Nothing with
        ``[cyborg_aer] enabled = False``.

        :returns: ``rows``, read again if the device was set unhealthy.
        """
        if not self.policy.enabled:
            return rows
        effect = self.store.aer.raise_effect(
            nodename, accelerator.address, FENCE,
            "the kernel's PCIe error recovery of %s failed (uevent "
            "ERROR_EVENT=FAILED_RECOVERY): unusable until it is reset or "
            "replaced" % function, self.clock())
        LOG.warning('Accelerator %s: PCIe AER effect %s: %s',
                    accelerator.address, effect.effect, effect.reason)
        if self._take(nodename, accelerator, effect, rows):
            return self.store.devices(nodename)
        return rows

    def _take(self, nodename: str, accelerator: device_model.Accelerator,
              effect: health_table.Effect,
              rows: dict[str, state_store.DeviceState]) -> bool:
        """Apply the device's ``effect``; whether it was set unhealthy."""
        row = rows.get(accelerator.address)
        state = row.state if row is not None else None
        fenced = False
        if effect.effect == FENCE and state == state_store.READY:
            # Until the operator clears it, whoever set it ready.
            self.store.set_state(nodename, accelerator.address,
                                 state_store.UNHEALTHY, effect.reason)
            LOG.warning('Accelerator %s fenced: %s', accelerator.address,
                        effect.reason)
            state = state_store.UNHEALTHY
            fenced = True
        self._notify(nodename, accelerator, effect, state)
        return fenced

    def _raise(self, nodename: str, address: str, strongest: str,
               found: list[Cause], now: float
               ) -> health_table.Effect | None:
        if strongest == NONE:
            return None
        reason = '; '.join(c.message for c in found if c.effect != NONE)
        effect = self.store.aer.raise_effect(nodename, address, strongest,
                                             reason, now)
        LOG.warning('Accelerator %s: PCIe AER effect %s: %s', address,
                    effect.effect, effect.reason)
        return effect

    def _notify(self, nodename: str,
                accelerator: device_model.Accelerator,
                effect: health_table.Effect, state: str | None) -> None:
        if (self.notifier is None or not self.notifier.enabled
                or not health_table.stronger(effect.effect,
                                             effect.notified)):
            return
        if not self.store.aer.claim_notification(nodename,
                                                 accelerator.address,
                                                 effect.effect):
            return
        self.notifier.emit(EVENT, accelerator, nodename, state,
                           '%s: %s' % (effect.effect, effect.reason))


def acknowledge(store: state_store.StateStore, nodename: str, address: str,
                sysfs_root: str) -> list[aer.AerCounters]:
    """Clear a device's AER effect; its counts now are the new baseline.

    Reads the counters of the functions the store has counts of (those
    the last discovery read) again from ``sysfs_root``. A device with no
    counts recorded is left as it is.

    :returns: the counters read.
    """
    functions = sorted({row.function for row in store.aer.counters(
        nodename).get(address, ())})
    if not functions and address not in store.aer.effects(nodename):
        return []
    read = aer.read_functions(
        os.path.join(sysfs_root, 'bus', 'pci', 'devices'), functions)
    store.aer.acknowledge(nodename, address, _counts(read))
    LOG.info('Accelerator %s: PCIe AER counts acknowledged: %s', address,
             '; '.join(c.summary() for c in read) or 'none recorded')
    return list(read)
