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

"""A real Placement server that a test can kill and start again.

tools/placement_server.py on a fixed loopback port and one SQLite file:
:meth:`Placement.kill` sends SIGKILL (an outage as a crashed or
restarted Placement gives: connections refused, requests in flight
cut), :meth:`Placement.start` brings it back on the same port with the
same database.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request

from tests.functional import placement_fixture


class Placement:
    """Placement in ``state_dir``; started by :meth:`start`."""

    def __init__(self, state_dir: str) -> None:
        self.state_dir = state_dir
        self.port = 0
        self.proc = None
        self.endpoint = None
        self.starts = 0

    def start(self, timeout: float = 60) -> 'Placement':
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(placement_fixture.TOOLS,
                                          'placement_server.py'),
             '--state-dir', self.state_dir, '--port', str(self.port)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        deadline = time.monotonic() + timeout
        line = ''
        while not line.startswith('listening '):
            line = self.proc.stdout.readline()
            if not line or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError('Placement did not start')
        self.endpoint = line.split()[1]
        self.port = int(self.endpoint.rsplit(':', 1)[1])
        # Placement logs each request on stdout: keep the pipe drained.
        stdout = self.proc.stdout
        threading.Thread(target=lambda: [None for _ in stdout], daemon=True,
                         name='placement-stdout').start()
        with urllib.request.urlopen(self.endpoint + '/', timeout=10) as r:
            assert r.status == 200
        self.starts += 1
        return self

    def kill(self) -> None:
        """SIGKILL, as a crash (or a host losing power) stops it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ensure_running(self) -> None:
        if not self.running():
            self.start()

    def integrity(self) -> str:
        """``PRAGMA integrity_check`` of Placement's own database."""
        return integrity(os.path.join(self.state_dir, 'placement.sqlite'))

    def env(self) -> dict:
        return {'OS_AUTH_TYPE': 'admin_token', 'OS_TOKEN': 'admin',
                'OS_ENDPOINT': self.endpoint}


def integrity(path: str) -> str:
    """``PRAGMA integrity_check`` of the SQLite file at ``path``."""
    db = sqlite3.connect(path, timeout=30)
    try:
        return ';'.join(row[0] for row in db.execute(
            'PRAGMA integrity_check'))
    finally:
        db.close()
