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

"""Scrub before reuse: a freed unit is cleaned before the next guest.

The unit books hold every unit they free (``[cyborg_scrub] enabled``): the hold
(:class:`~cyborg_nova.store.units.Hold`) is written in the transaction
that frees the unit, so no consumer can be given it, and it counts as
reserved in Placement (:meth:`~cyborg_nova.store.units.UnitTable.kept`)
from nova-compute's next report on. :class:`Scrubber` then runs the
steps of the unit's family (:meth:`~cyborg_drivers.base.
AcceleratorDriver.scrub`, each under ``[cyborg_scrub] step_timeout``) and:

- lifts the hold: the unit is free again, and ``reserved`` is written
  down at once (:mod:`cyborg_nova.fencing`);
- or, for a one-time-use device, keeps it ``used`` until the operator
  marks the unit ready (:func:`mark_ready`);
- or, when a step fails or hangs, keeps it ``failed`` and fences its
  device (state ``failed``, the reason naming the unit, the step and
  what it said), as a failed FPGA load is.

A scrub is claimed by its process (``pid@host``) in the store: a process
killed mid-scrub leaves the hold, which the next one (nova-compute at
its start, or its next cycle) takes over and runs again from the first
step; the steps are safe to repeat. Nothing is handed out half-scrubbed.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
import time
from typing import Callable, Iterable, Mapping, Sequence

from oslo_config import cfg

from cyborg_drivers import base
from cyborg_drivers import device as device_model
from cyborg_nova import provider_devices
from cyborg_nova import remote_devices
from cyborg_nova import store as state_store
from cyborg_nova.store import units as unit_store

LOG = logging.getLogger(__name__)

#: ``devices(providers)``: {provider: device} of those found.
DeviceLookup = Callable[[Iterable[str]],
                        Mapping[str, provider_devices.ProviderDevice]]
#: ``fence(device, state)``: write the device's provider's ``reserved``
#: for ``state`` now (the holds counted).
Fence = Callable[[provider_devices.ProviderDevice, str], object]

#: What became of one scrub.
FREE = 'free'
USED = unit_store.USED
FAILED = unit_store.FAILED
#: The device is not there to scrub (gone, or not recorded): held.
WAITING = 'waiting'


class MarkRefused(Exception):
    """A unit cannot be marked ready; the message says why."""


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One unit's scrub."""

    provider: str
    unit: str
    #: FREE, USED, FAILED or WAITING.
    result: str
    #: What each step did, in order.
    done: tuple[str, ...] = ()
    reason: str | None = None
    #: Seconds from the release to the end of the scrub: how long the
    #: unit was kept from the next guest (until marked ready, if USED).
    held_for: float = 0.0


def this_process() -> str:
    """The owner name of a scrub run by this process."""
    return '%d@%s' % (os.getpid(), socket.gethostname())


def gone_owners(owners: Iterable[str | None]) -> list[str]:
    """Those of ``owners`` that are processes of this host that died."""
    host = socket.gethostname()
    gone = []
    for owner in set(o for o in owners if o):
        pid, _, where = owner.partition('@')
        if where != host or not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            gone.append(owner)
        except PermissionError:
            pass  # alive, another user's
    return sorted(gone)


def steps_for(conf: cfg.ConfigOpts, driver: base.AcceleratorDriver
              ) -> tuple[str, ...]:
    """The steps ``[cyborg_scrub] steps`` gives ``driver``'s units."""
    configured = conf.cyborg_scrub.steps
    if driver.name not in configured:
        return tuple(driver.SCRUB_STEPS)
    return tuple(s.strip() for s in configured[driver.name].split('+')
                 if s.strip())


def one_time_use(conf: cfg.ConfigOpts,
                 accelerator: device_model.Accelerator) -> bool:
    """Whether ``accelerator``'s freed units wait for the operator."""
    listed = set(conf.cyborg_scrub.one_time_use)
    return accelerator.driver in listed or accelerator.address in listed


class Scrubber:
    """Runs the scrubs of this host's held units; see the module.

    :param drivers: the loaded drivers (asked on each run).
    :param sysfs_root: the sysfs root (asked on each run).
    :param ops: the privileged writes of the steps (asked on each run).
    :param devices: the devices behind providers.
    :param fence: writes a provider's ``reserved`` at once; None leaves
        it to nova-compute's next report.
    """

    def __init__(self, conf: cfg.ConfigOpts, store: state_store.StateStore,
                 drivers: Callable[[], Sequence[base.AcceleratorDriver]],
                 sysfs_root: Callable[[], str], ops: Callable[[], object],
                 devices: DeviceLookup, fence: Fence | None = None) -> None:
        self.conf = conf
        self.store = store
        self.units = store.units
        self._drivers = drivers
        self._root = sysfs_root
        self._ops = ops
        self._devices = devices
        self._fence = fence
        self.owner = this_process()
        self._lock = threading.Lock()
        self._again = False
        self._waiting_logged: set[tuple[str, str]] = set()

    def pending(self) -> list[unit_store.Hold]:
        """The held units still to scrub."""
        return self.units.holds(state=unit_store.SCRUBBING)

    def run(self) -> list[Outcome]:
        """Scrub every held unit nobody is scrubbing; what became of each.

        A call while another runs in this process returns at once (an
        empty list): the running one goes round again for what was
        held meanwhile.
        """
        outcomes: list[Outcome] = []
        while True:
            if not self._lock.acquire(blocking=False):
                self._again = True
                return outcomes
            try:
                self._again = False
                outcomes += self._run_once()
            finally:
                self._lock.release()
            # Asked again while it ran (after the lock is let go, so a
            # call that found it taken is never left unserved).
            if not self._again:
                return outcomes

    def _run_once(self) -> list[Outcome]:
        holds = self.pending()
        if not holds:
            return []
        stale = gone_owners(h.owner for h in holds if h.owner != self.owner)
        try:
            found = self._devices(sorted({h.provider for h in holds}))
        except Exception as exc:
            LOG.warning('Held units cannot be scrubbed now, their devices '
                        'cannot be read: %s; they stay held', exc)
            return []
        drivers = {d.name: d for d in self._drivers()}
        outcomes = []
        touched: dict[str, provider_devices.ProviderDevice] = {}
        for hold in holds:
            if hold.owner not in (None, self.owner) and (
                    hold.owner not in stale):
                continue  # another live process scrubs it
            with self.units.change() as table:
                if not table.claim(hold.provider, hold.unit, self.owner,
                                   stale):
                    continue
            if hold.owner in stale:
                LOG.warning('Scrub of unit %s was left by process %s, '
                            'which is gone: running it again from the '
                            'first step', hold.unit, hold.owner)
            device = found.get(hold.provider)
            outcome = self._scrub(hold, device, drivers)
            outcomes.append(outcome)
            if device is not None and outcome.result != WAITING:
                touched[hold.provider] = device
        for device in touched.values():
            self._fence_now(device)
        return outcomes

    def _scrub(self, hold: unit_store.Hold,
               device: provider_devices.ProviderDevice | None,
               drivers: Mapping[str, base.AcceleratorDriver]) -> Outcome:
        if device is None:
            # Gone from the bus or not recorded: its provider is fenced
            # as vanished devices are; scrubbed when it is back.
            with self.units.change() as table:
                table.set_hold(hold.provider, hold.unit,
                               unit_store.SCRUBBING, owner=self.owner)
            if (hold.provider, hold.unit) not in self._waiting_logged:
                self._waiting_logged.add((hold.provider, hold.unit))
                LOG.warning('Unit %s of provider %s is held for its scrub, '
                            'but its device is not on this host now; it '
                            'stays held', hold.unit, hold.provider)
            return Outcome(hold.provider, hold.unit, WAITING)
        if device.endpoint is not None:
            return self._finish(hold, device, (), 'not scrubbed: a unit of '
                                'out-of-process driver %s' % device.endpoint)
        if hold.unit not in device.accelerator.units:
            # Its VFs were removed (and maybe made again, which resets
            # them): holding it would reserve a unit that is not there.
            return self._finish(hold, device, (), 'nothing to scrub: no '
                                'longer a unit of the device')
        driver = drivers.get(device.accelerator.driver)
        if driver is None:
            return self._fail(hold, device, (), 'its driver %s is not '
                              'enabled on this host, so nothing can scrub '
                              'it' % device.accelerator.driver)
        done: list[str] = []
        for step in steps_for(self.conf, driver):
            try:
                done.append('%s: %s' % (step, self._timed(
                    lambda: driver.scrub(self._root(), device.accelerator,
                                         hold.unit, step, self._ops()))))
            except Exception as exc:
                return self._fail(hold, device, done, 'step %s: %s'
                                  % (step, exc))
        return self._finish(hold, device, done)

    def _timed(self, step: Callable[[], str]) -> str:
        timeout = self.conf.cyborg_scrub.step_timeout
        result: dict = {}
        finished = threading.Event()

        def target():
            try:
                result['value'] = step()
            except BaseException as exc:
                result['error'] = exc
            finally:
                finished.set()
        # A step that hangs in the kernel keeps its thread; the scrub
        # does not wait for it.
        threading.Thread(target=target, name='scrub-step',
                         daemon=True).start()
        if not finished.wait(timeout):
            raise TimeoutError('did not finish within %d s ([cyborg_scrub] '
                               'step_timeout)' % timeout)
        if 'error' in result:
            raise result['error']
        return result['value']

    def _finish(self, hold: unit_store.Hold,
                device: provider_devices.ProviderDevice,
                done: Sequence[str], note: str | None = None) -> Outcome:
        held_for = time.time() - hold.since
        used = one_time_use(self.conf, device.accelerator)
        with self.units.change() as table:
            if used:
                table.set_hold(hold.provider, hold.unit, unit_store.USED,
                               owner=self.owner)
            else:
                table.lift(hold.provider, hold.unit, [unit_store.SCRUBBING],
                           owner=self.owner)
        what = '; '.join(done) or note or 'no steps'
        if used:
            LOG.info('Unit %s of accelerator %s scrubbed (%s) in %.3f s; '
                     'one-time-use: held until "cyborg-nova '
                     'device-set-state %s ready"', hold.unit, device.address,
                     what, held_for, hold.unit)
        else:
            LOG.info('Unit %s of accelerator %s scrubbed (%s): free again '
                     '%.3f s after consumer %s released it', hold.unit,
                     device.address, what, held_for, hold.consumer)
        return Outcome(hold.provider, hold.unit, USED if used else FREE,
                       tuple(done), note, held_for)

    def _fail(self, hold: unit_store.Hold,
              device: provider_devices.ProviderDevice,
              done: Sequence[str], why: str) -> Outcome:
        if hold.unit == device.address:
            # The command gives the unit back and readies its device.
            fix = '"cyborg-nova device-set-state %s ready"' % hold.unit
        else:
            fix = ('"cyborg-nova device-set-state %s ready" and "cyborg-nova'
                   ' device-set-state %s ready"' % (hold.unit,
                                                    device.address))
        reason = ('scrub of unit %s failed: %s; the unit stays held. Fix '
                  'it, then %s' % (hold.unit, why, fix))
        with self.units.change() as table:
            table.set_hold(hold.provider, hold.unit, unit_store.FAILED,
                           reason, owner=self.owner)
        self.store.set_state(device.nodename, device.address,
                             state_store.FAILED, reason)
        LOG.error('Accelerator %s fenced (state failed): %s',
                  device.address, reason)
        return Outcome(hold.provider, hold.unit, FAILED, tuple(done),
                       reason, time.time() - hold.since)

    def _fence_now(self, device: provider_devices.ProviderDevice) -> None:
        if self._fence is None:
            return
        state = device_state(self.store, device)
        try:
            self._fence(device, state)
        except Exception as exc:
            # nova-compute's next report writes the same value.
            LOG.warning('reserved of accelerator %s not written now: %s',
                        device.address, exc)


def device_state(store: state_store.StateStore,
                 device: provider_devices.ProviderDevice) -> str:
    """The lifecycle state ``device``'s ``reserved`` is computed from.

    As nova-compute's report has it: the store's row of a local device,
    the driver's state of an out-of-process one; ``failed`` (fully
    reserved) for a device neither knows.
    """
    if device.endpoint is None:
        row = store.devices(device.nodename).get(device.address)
        return row.state if row is not None else state_store.FAILED
    for remote in remote_devices.devices(store, device.nodename):
        if (remote.endpoint, remote.address) == (device.endpoint,
                                                 device.address):
            return remote.state
    return state_store.FAILED


def held_since(hold: unit_store.Hold) -> str:
    """When ``hold`` began, in the host's local time, for an operator."""
    return time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(hold.since))


def mark_ready(store: state_store.StateStore, unit: str) -> unit_store.Hold:
    """Give back a held ``unit`` the operator vouches for; its hold.

    A one-time-use unit (``used``) or one whose scrub failed
    (``failed``) is free again; the device's own state is the
    operator's to set (``device-set-state <device> ready``).

    :raises MarkRefused: the unit is not held, or its scrub is running.
    """
    hold = store.units.hold(unit)
    if hold is None:
        raise MarkRefused('unit %s is not held back; "cyborg-nova '
                          'device-show <device>" lists the held units of a '
                          'device' % unit)
    if hold.state == unit_store.SCRUBBING:
        raise MarkRefused(
            'unit %s is still being scrubbed (since %s): it is free again '
            'once the scrub ends; marking it ready now would hand it out '
            'half-scrubbed' % (unit, held_since(hold)))
    with store.units.change() as table:
        if not table.lift(hold.provider, unit,
                          [unit_store.USED, unit_store.FAILED]):
            raise MarkRefused('unit %s changed meanwhile; try again' % unit)
    LOG.info('Unit %s (%s) marked ready by the operator: free again',
             unit, hold.state)
    return hold
