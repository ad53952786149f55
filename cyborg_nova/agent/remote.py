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

"""Out-of-process drivers: a vendor's driver running as its own service.

The internal API spec lets a driver live outside the agent: it announces
itself with the agent's ``POST /hello`` (``{"status": "READY",
"endpoint": URL, "type": DEVICE_TYPE}``, the URL also as the spec's bare
``host:port``) and serves the driver half of
the API, ``GET /hardware`` and ``POST /discovery``. The agent then polls
it: :class:`RemoteDriver` is one driver's state machine (UP, DOWN after
``threshold`` consecutive failures, UP again on the next answer) and
:class:`Registry` keeps them, polls them from a small thread pool and
merges their devices into the agent's listing as remote ones.

An entry that carries this project's extension (``pci`` and
``placement``, as ``cyborg-nova-driver`` serves them) is a device like a
local one: the registry hands each driver's state and devices to its
``on_change`` callback, which the agent uses to record them in the state
store (nova-compute reports them to Placement from there) and to fence
them at once when the driver goes DOWN. Entries of the seed's bare shape
are listed only.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import queue
import threading
import time
from typing import Any, Callable

import jsonschema

from cyborg_drivers import device as device_model
from cyborg_nova.api import endpoints
from cyborg_nova import service_client

LOG = logging.getLogger(__name__)

UP = 'UP'
DOWN = 'DOWN'
STATES = (UP, DOWN)

#: Drivers one agent keeps; a host has a handful.
MAX_DRIVERS = 64
#: A DOWN driver is polled at most this many intervals apart.
MAX_BACKOFF = 8
#: Largest ``GET /hardware`` answer read from a driver.
MAX_RESPONSE = 4 * 1024 * 1024
#: Seconds for a driver's answer.
TIMEOUT = 10.0

#: A driver's ``GET /hardware`` answer, as the internal API spec has it.
#: Unknown keys are allowed (drivers add their own), but only the spec's
#: are passed on.
HARDWARE_SCHEMA = {
    'type': 'object',
    'required': ['hardware'],
    'properties': {'hardware': {'type': 'array', 'maxItems': 4096,
                                'items': {'type': 'object'}}},
}
ENTRY_SCHEMA = {
    'type': 'object',
    'required': ['uuid', 'acc_specs'],
    'properties': {
        'uuid': {'type': 'string', 'minLength': 1, 'maxLength': 64},
        'acc_specs': {
            'type': 'object',
            'properties': {
                'remote': {'type': 'integer'},
                'num': {'type': 'integer', 'minimum': 0},
                'device_type': {'enum': list(device_model.DEVICE_TYPES)},
                'acc_capability': {'type': 'object'},
            },
        },
        'acc_status': {'type': 'object'},
    },
}


#: Keys of an entry kept beyond the spec's: this project's extension,
#: what Placement and the guest need (see
#: :meth:`cyborg_drivers.device.Accelerator.to_hardware`).
EXTENSION_KEYS = device_model.Accelerator.HARDWARE_EXTENSION_KEYS

#: ``on_change(endpoint, type, state, hardware)``: a driver's state or
#: devices as polled differ from what was last handed over.
OnChange = Callable[[str, str, str, list], None]

#: An endpoint that is not an http(s) URL the agent can call.
InvalidEndpoint = endpoints.InvalidEndpoint


class RegistryFull(Exception):
    """Too many drivers are registered and none of them is DOWN."""


def validate_endpoint(endpoint: str) -> str:
    """The endpoint as an http(s) URL without a trailing slash.

    The spec's bare ``host:port`` is taken as ``http://host:port``
    (:func:`cyborg_nova.api.endpoints.normalize`).

    :raises InvalidEndpoint: with a message saying what is wrong.
    """
    return endpoints.normalize(endpoint)


def parse_hardware(document: Any) -> tuple[list[dict], list[str]]:
    """The valid entries of a driver's ``GET /hardware`` answer.

    :returns: (entries, problems): entries reduced to the spec's keys;
        one problem per entry left out.
    :raises ValueError: the answer as a whole is not a hardware list.
    """
    try:
        jsonschema.validate(document, HARDWARE_SCHEMA)
    except jsonschema.ValidationError as exc:
        raise ValueError('not a hardware list: %s' % exc.message)
    entries, problems = [], []
    for n, entry in enumerate(document['hardware']):
        try:
            jsonschema.validate(entry, ENTRY_SCHEMA)
        except jsonschema.ValidationError as exc:
            problems.append('entry %d left out: %s' % (n, exc.message))
            continue
        entries.append({'uuid': entry['uuid'],
                        'acc_specs': dict(entry['acc_specs']),
                        'acc_status': _status(entry.get('acc_status', {})),
                        **{k: entry[k] for k in EXTENSION_KEYS
                           if k in entry}})
    return entries, problems


def _status(acc_status: dict) -> dict:
    """A driver's ``acc_status``, the spec's misspelt key corrected.

    The spec's example has ``reboot_equired``; it is read as
    ``reboot_required`` (when that is not there too).
    """
    acc_status = dict(acc_status)
    if 'reboot_equired' in acc_status and (
            'reboot_required' not in acc_status):
        acc_status['reboot_required'] = acc_status.pop('reboot_equired')
    return acc_status


@dataclasses.dataclass
class RemoteDriver:
    """One registered out-of-process driver and what the agent knows of it.

    Not thread-safe by itself: the :class:`Registry` serialises access.
    """

    endpoint: str
    type: str
    registered_at: float
    state: str = UP
    #: Consecutive failed calls.
    failures: int = 0
    last_error: str | None = None
    #: time.time() of the last good answer; None before the first.
    last_seen: float | None = None
    #: Its devices from the last good answer (kept while it is DOWN).
    hardware: list[dict] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)
    #: time.monotonic() when it is polled next.
    next_poll: float = 0.0
    #: When it went DOWN (time.monotonic()), to evict the longest DOWN.
    down_since: float | None = None
    #: (state, hardware) last handed to the registry's ``on_change``.
    recorded: tuple | None = None

    def succeeded(self, hardware: list[dict], problems: list[str],
                  now: float, interval: float) -> bool:
        """Record a good answer; True when this brings it back UP."""
        back = self.state == DOWN
        self.state = UP
        self.failures = 0
        self.last_error = None
        self.last_seen = time.time()
        self.hardware = hardware
        self.problems = problems
        self.down_since = None
        self.next_poll = now + interval
        return back

    def failed(self, error: str, now: float, interval: float,
               threshold: int) -> bool:
        """Record a failed call; True when this makes it DOWN."""
        self.failures += 1
        self.last_error = error
        went_down = False
        if self.state == UP and self.failures >= threshold:
            self.state = DOWN
            self.down_since = now
            went_down = True
        # Poll a DOWN driver less and less often, but keep polling: it
        # comes back UP on its own as soon as it answers.
        factor = 1
        if self.state == DOWN:
            factor = min(2 ** (self.failures - threshold), MAX_BACKOFF)
        self.next_poll = now + interval * factor
        return went_down

    def hello(self, type_: str, now: float) -> None:
        """The driver (re-)registered: it says it is READY, poll it now."""
        self.type = type_
        self.state = UP
        self.failures = 0
        self.down_since = None
        self.next_poll = now

    @property
    def name(self) -> str:
        return '%s@%s' % (self.type, self.endpoint)

    def view(self) -> dict:
        """The driver as ``GET /drivers`` lists it."""
        return {'endpoint': self.endpoint, 'type': self.type,
                'state': self.state, 'failures': self.failures,
                'last_error': self.last_error,
                'last_seen': self.last_seen,
                'registered_at': self.registered_at,
                'devices': len(self.hardware),
                'problems': list(self.problems)}

    def devices(self) -> list[dict]:
        """Its devices as ``GET /hardware`` entries of the agent."""
        problems = []
        if self.state == DOWN:
            problems.append('driver %s is DOWN: %s' % (self.name,
                                                       self.last_error))
        entries = []
        for entry in self.hardware:
            specs = dict(entry['acc_specs'])
            specs['remote'] = 1
            specs.setdefault('num', 1)
            specs.setdefault('device_type', self.type)
            specs.setdefault('acc_capability', {})
            entries.append({
                'uuid': entry['uuid'],
                'acc_specs': specs,
                'acc_status': entry['acc_status'],
                'driver': self.name,
                'endpoint': self.endpoint,
                'state': None,
                'health': {'healthy': not problems,
                           'problems': list(problems)},
                **{k: entry[k] for k in ('pci', 'placement')
                   if k in entry},
            })
        return entries


class DriverClient:
    """Calls the driver half of the internal API over HTTP.

    Without a token: the seed gives drivers none, and they listen on
    loopback only.
    """

    def __init__(self, timeout: float = TIMEOUT) -> None:
        self.timeout = timeout
        self._clients: dict[str, service_client.Client] = {}
        self._lock = threading.Lock()

    def _client(self, endpoint: str) -> service_client.Client:
        # One client (and its kept-alive connection) per driver.
        with self._lock:
            client = self._clients.get(endpoint)
            if client is None:
                client = self._clients[endpoint] = service_client.Client(
                    endpoint, 'out-of-process driver',
                    timeout=self.timeout)
            return client

    def hardware(self, endpoint: str) -> tuple[list[dict], list[str]]:
        """``GET <endpoint>/hardware``: (entries, problems).

        :raises service_client.ServiceError: unreachable, an error
            status, or not JSON.
        :raises ValueError: not a hardware list.
        """
        return parse_hardware(self._client(endpoint).get(
            '/hardware', max_response=MAX_RESPONSE))

    def discover(self, endpoint: str) -> None:
        """``POST <endpoint>/discovery``.

        :raises service_client.ServiceError: unreachable or an error
            status.
        """
        self._client(endpoint).post('/discovery')

    def forget(self, endpoint: str) -> None:
        """Close the connection to a driver no longer polled."""
        with self._lock:
            client = self._clients.pop(endpoint, None)
        if client is not None:
            client.close()


class Registry:
    """The registered drivers, polled in the background.

    :param threshold: consecutive failures that make a driver DOWN.
    :param interval: seconds between polls of an UP driver.
    :param client: how drivers are called (:class:`DriverClient`).
    :param workers: polls run at once; a driver that does not answer
        holds one worker for at most the client's timeouts.
    """

    def __init__(self, threshold: int, interval: float,
                 client: DriverClient | None = None, workers: int = 4,
                 max_drivers: int = MAX_DRIVERS,
                 clock: Callable[[], float] = time.monotonic,
                 on_change: OnChange | None = None) -> None:
        self.threshold = threshold
        self.interval = interval
        self.client = client or DriverClient()
        self.max_drivers = max_drivers
        self.clock = clock
        self.on_change = on_change
        self._drivers: dict[str, RemoteDriver] = {}
        self._busy: set[str] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._workers = workers
        # Daemon threads fed by a queue rather than an executor: a poll
        # stuck on an unreachable endpoint must not hold up the agent's
        # exit, and an executor's workers are joined at exit.
        self._queue: queue.SimpleQueue | None = None
        self._thread: threading.Thread | None = None

    # -- registration and listing -----------------------------------------

    def hello(self, endpoint: str, type_: str) -> dict:
        """Register (or re-register) a driver; poll it at once.

        :raises InvalidEndpoint: ``endpoint`` is not an http(s) URL.
        :raises RegistryFull: ``max_drivers`` are registered, none DOWN.
        """
        endpoint = validate_endpoint(endpoint)
        now = self.clock()
        with self._lock:
            driver = self._drivers.get(endpoint)
            if driver is None:
                if len(self._drivers) >= self.max_drivers:
                    self._evict()
                driver = RemoteDriver(endpoint, type_, time.time(),
                                      next_poll=now)
                self._drivers[endpoint] = driver
                LOG.info('Out-of-process driver %s registered', driver.name)
            else:
                driver.hello(type_, now)
                LOG.info('Out-of-process driver %s registered again',
                         driver.name)
            view = driver.view()
        # The first contact also asks it to discover (spec: the agent
        # starts discovery across all drivers).
        self._submit(endpoint, discover=True)
        return view

    def _evict(self) -> None:
        down = [d for d in self._drivers.values() if d.state == DOWN]
        if not down:
            raise RegistryFull('%d out-of-process drivers are registered '
                               'and all are UP' % len(self._drivers))
        oldest = min(down, key=lambda d: d.down_since or 0.0)
        del self._drivers[oldest.endpoint]
        self.client.forget(oldest.endpoint)
        LOG.warning('Forgetting out-of-process driver %s (DOWN: %s) to '
                    'make room', oldest.name, oldest.last_error)

    def drivers(self) -> list[dict]:
        with self._lock:
            return [self._drivers[e].view() for e in sorted(self._drivers)]

    def hardware(self) -> list[dict]:
        with self._lock:
            return [entry for e in sorted(self._drivers)
                    for entry in self._drivers[e].devices()]

    def discover_all(self) -> int:
        """Ask every registered driver to discover; how many were asked."""
        with self._lock:
            endpoints = list(self._drivers)
        for endpoint in endpoints:
            self._submit(endpoint, discover=True)
        return len(endpoints)

    # -- polling -----------------------------------------------------------

    def start(self) -> None:
        """Start polling in the background."""
        if self._thread is not None:
            return
        self._queue = queue.SimpleQueue()
        for n in range(self._workers):
            threading.Thread(target=self._work, daemon=True,
                             name='remote-driver-%d' % n).start()
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name='remote-driver-poller')
        self._thread.start()

    def stop(self) -> None:
        """Stop polling; calls in flight are abandoned, not awaited."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(5)
        if self._queue is not None:
            for _ in range(self._workers):
                self._queue.put(None)

    def _loop(self) -> None:
        while not self._stopping.is_set():
            # Cleared before looking: a wake-up from here on is not lost.
            self._wake.clear()
            now = self.clock()
            with self._lock:
                due = [d.endpoint for d in self._drivers.values()
                       if d.next_poll <= now and d.endpoint not in self._busy]
                upcoming = [d.next_poll for d in self._drivers.values()
                            if d.endpoint not in self._busy]
            for endpoint in due:
                self._submit(endpoint)
            wait = min(upcoming, default=now + self.interval) - now
            self._wake.wait(max(0.05, min(wait, self.interval)))

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None or self._stopping.is_set():
                return
            self._poll_and_release(*item)

    def _submit(self, endpoint: str, discover: bool = False) -> None:
        with self._lock:
            if endpoint in self._busy and not discover:
                return
            self._busy.add(endpoint)
        if self._queue is None or self._stopping.is_set():
            # Not started (unit tests drive poll() themselves).
            with self._lock:
                self._busy.discard(endpoint)
            return
        self._queue.put((endpoint, discover))

    def _poll_and_release(self, endpoint: str, discover: bool) -> None:
        try:
            self.poll(endpoint, discover)
        except Exception:
            LOG.exception('Polling out-of-process driver %s failed',
                          endpoint)
        finally:
            with self._lock:
                self._busy.discard(endpoint)
            self._wake.set()

    def poll(self, endpoint: str, discover: bool = False) -> None:
        """Fetch one driver's hardware (first asking it to discover)."""
        try:
            entries, problems = self.client.hardware(endpoint)
            if discover:
                self.client.discover(endpoint)
            error = None
        except (service_client.ServiceError, ValueError) as exc:
            error = str(exc)
        now = self.clock()
        with self._lock:
            driver = self._drivers.get(endpoint)
            if driver is None:
                return
            if error is None:
                known = set(driver.problems)
                if driver.succeeded(entries, problems, now, self.interval):
                    LOG.warning('Out-of-process driver %s is UP again',
                                driver.name)
                # Each problem once, not at every poll.
                for problem in sorted(set(problems) - known):
                    LOG.warning('Out-of-process driver %s: %s',
                                driver.name, problem)
            elif driver.failed(error, now, self.interval, self.threshold):
                # Logged once per outage; every failure is at debug.
                LOG.warning('Out-of-process driver %s is DOWN after %d '
                            'failed calls (%s): its %d devices are listed '
                            'unhealthy', driver.name, driver.failures,
                            error, len(driver.hardware))
            else:
                LOG.debug('Out-of-process driver %s: %s (%d in a row)',
                          driver.name, error, driver.failures)
            change = self._change(driver, error is None)
        if change is not None:
            self._hand_over(endpoint, change)

    @staticmethod
    def _change(driver: RemoteDriver, answered: bool) -> tuple | None:
        """(type, state, hardware) to hand over, if it changed.

        Only what a poll proved: a good answer (UP and its devices) or
        DOWN; a failure short of the threshold changes nothing yet.
        """
        if not answered and driver.state != DOWN:
            return None
        snapshot = (driver.state, json.dumps(driver.hardware,
                                             sort_keys=True))
        if snapshot == driver.recorded:
            return None
        driver.recorded = snapshot
        return driver.type, driver.state, list(driver.hardware)

    def _hand_over(self, endpoint: str, change: tuple) -> None:
        if self.on_change is None:
            return
        try:
            self.on_change(endpoint, *change)
        except Exception:
            LOG.exception('Recording out-of-process driver %s failed; '
                          'retried at its next poll', endpoint)
            with self._lock:
                driver = self._drivers.get(endpoint)
                if driver is not None:
                    driver.recorded = None
