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

"""What every service process does around its service: signals, waiting."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Callable


def on_signals(log: logging.Logger) -> threading.Event:
    """An event SIGTERM and SIGINT set (each logged)."""
    stopping = threading.Event()

    def on_signal(signum, frame):
        log.info('Signal %d: stopping', signum)
        stopping.set()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stopping


def serve(log: logging.Logger, url: str, stopping: threading.Event,
          stop: Callable[[], None]) -> int:
    """Say ``listening <url>`` on stdout, wait for ``stopping``, ``stop``.

    :returns: the exit status, 0.
    """
    print('listening %s' % url, flush=True)
    # A timeout keeps the main thread waking up, so signal handlers run
    # promptly whatever the platform's lock semantics.
    while not stopping.wait(1.0):
        pass
    stop()
    log.info('Stopped')
    return 0
