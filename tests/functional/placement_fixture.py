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

"""A real Placement server process on loopback (tools/placement_server.py).
"""

import os
import subprocess
import sys
import threading
import time
import urllib.request

import fixtures

TOOLS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), 'tools')


def _drain(stream) -> None:
    for _ in stream:
        pass


class PlacementServer(fixtures.Fixture):
    """Starts Placement (SQLite, noauth2) and stops it at cleanup.

    ``endpoint`` is its URL; the admin token is ``admin``.
    """

    def _setUp(self):
        state_dir = self.useFixture(fixtures.TempDir()).path
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(TOOLS, 'placement_server.py'),
             '--state-dir', state_dir],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.addCleanup(self._stop)
        deadline = time.monotonic() + 60
        for line in self.proc.stdout:
            if line.startswith('listening '):
                self.endpoint = line.split()[1]
                break
            if time.monotonic() > deadline:
                break
        else:
            raise RuntimeError('Placement did not start')
        # Keep reading what the server prints (a log line per request):
        # a pipe nobody reads fills up, and the server then blocks
        # writing its log line in the middle of an answer.
        threading.Thread(target=_drain, args=(self.proc.stdout,),
                         daemon=True, name='placement-output').start()
        with urllib.request.urlopen(self.endpoint + '/') as resp:
            assert resp.status == 200

    def _stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def env(self):
        return {'OS_AUTH_TYPE': 'admin_token', 'OS_TOKEN': 'admin',
                'OS_ENDPOINT': self.endpoint}
