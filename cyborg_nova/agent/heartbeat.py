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

"""Registering with the conductor and heartbeating: ``POST /hello``.

The internal API spec's "Conductor POST /hello": the agent announces its
endpoint, and repeats it so the conductor can tell a live agent from one
that went away. A conductor that is down or refuses is logged and retried
with backoff; it never stops the agent.
"""

from __future__ import annotations

import logging
import threading

from cyborg_nova import service_client

LOG = logging.getLogger(__name__)

#: Failed heartbeats space out up to this many intervals.
MAX_BACKOFF = 6
#: Seconds for the conductor's answer.
TIMEOUT = 10.0


class Heartbeat:
    """Posts ``{"status": "READY", "endpoint", "host"}`` periodically.

    :param conductor_url: the conductor's base URL.
    :param token: sent as ``X-Auth-Token``; None sends none.
    :param endpoint: this agent's API URL, as the conductor should use.
    :param host: this host's node name.
    :param interval: seconds between heartbeats.
    """

    def __init__(self, conductor_url: str, token: str | None,
                 endpoint: str, host: str, interval: float) -> None:
        self.client = service_client.Client(
            conductor_url, 'conductor-lite', token=token, timeout=TIMEOUT)
        self.url = self.client.url('/hello')
        self.body = {'status': 'READY', 'endpoint': endpoint, 'host': host}
        self.interval = interval
        self.failures = 0
        self.sent = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self) -> bool:
        """Send one heartbeat; whether the conductor accepted it."""
        try:
            self.client.post('/hello', self.body)
            error = None
        except service_client.ServiceError as exc:
            error = str(exc)
        if error is None:
            if self.failures:
                LOG.info('Conductor %s reachable again after %d failed '
                         'heartbeats', self.url, self.failures)
            self.failures = 0
            self.sent += 1
            return True
        self.failures += 1
        # Logged at the first failure and then at growing intervals, so
        # a conductor down for a day does not fill the log.
        level = (logging.WARNING
                 if self.failures & (self.failures - 1) == 0
                 else logging.DEBUG)
        LOG.log(level, 'Heartbeat to %s failed (%d in a row): %s',
                self.url, self.failures, error)
        return False

    def delay(self) -> float:
        """Seconds until the next heartbeat."""
        if not self.failures:
            return self.interval
        return self.interval * min(2 ** self.failures, MAX_BACKOFF)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, daemon=True,
                                            name='conductor-heartbeat')
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            # A heartbeat in flight is abandoned, not awaited: the thread
            # is a daemon and the conductor copes with a lost one.
            self._thread.join(1)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.beat()
            self._stop.wait(self.delay())
