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

"""What every service process does around its service: config, signals."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from typing import Callable

from oslo_config import cfg

from cyborg_nova.cmd import errors


def read_config(prog: str, load: Callable[[], cfg.ConfigOpts]
                ) -> cfg.ConfigOpts | None:
    """``load()``'s config, every option it registered read; or None.

    None when a config file is missing or malformed or a value is not
    valid: one line on stderr said so (``<prog>: error: ...``, naming
    the file, group, option and value of a bad value), and the service
    exits with :data:`~cyborg_nova.cmd.errors.CONFIG_ERROR`.
    """
    try:
        return errors.check_values(load())
    except cfg.Error as exc:
        print('%s: error: %s' % (prog, errors.explained(exc)),
              file=sys.stderr)
        return None


def start_error(conf: cfg.ConfigOpts, exc: Exception) -> Exception:
    """What to log of ``exc``, raised while a service starts.

    A value oslo.config could not take, read only now (an option
    registered after :func:`read_config`), is named as there.
    """
    if isinstance(exc, cfg.ConfigSourceValueError):
        return errors.described(conf, exc)
    return exc


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
