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

"""The conductor-lite as a real process, configured for one test.

It runs as ``python -m cyborg_nova.cmd.conductor --config-file X``
with a SQLite file (or the database given), on 127.0.0.1 and a free port
(it prints ``listening <url>`` once it accepts requests).
"""

import http.client
import json
import os
import select
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

ADMIN = 'conductor-admin-token'
READER = 'conductor-reader-token'
AGENT_TOKEN = 'agent-reader-token'


class Conductor:
    """A conductor-lite process in ``workdir``; :meth:`stop` it.

    :param down_time: ``agent_down_time``.
    :param placement: ``[placement]`` options, or None for none.
    :param connection: ``[database] connection``; a SQLite file in
        ``workdir`` by default.
    :param bind_port: the port; 0 for a free one, chosen anew at each
        start.
    """

    def __init__(self, workdir, down_time=60, agent_timeout=5.0,
                 placement=None, connection=None, bind_port=0):
        self.workdir = str(workdir)
        os.makedirs(self.workdir, exist_ok=True)
        self.config = os.path.join(self.workdir, 'conductor.conf')
        self.log_file = os.path.join(self.workdir, 'conductor.log')
        self.database = os.path.join(self.workdir, 'conductor.sqlite')
        sections = {
            'DEFAULT': {'log_file': self.log_file},
            'cyborg_conductor': {
                'bind_host': '127.0.0.1', 'bind_port': bind_port,
                'admin_token': ADMIN, 'reader_token': READER,
                'agent_token': AGENT_TOKEN,
                'agent_down_time': down_time,
                'agent_timeout': agent_timeout},
            'database': {'connection': connection
                         or 'sqlite:///%s' % self.database},
        }
        if placement:
            sections['placement'] = placement
        with open(self.config, 'w') as f:
            for section, options in sections.items():
                f.write('[%s]\n' % section)
                for key, value in options.items():
                    f.write('%s = %s\n' % (key, value))
        self.proc = None

    def start(self, timeout=30):
        """Start the process; returns once it accepts requests."""
        self._stderr = open(os.path.join(self.workdir, 'stderr'), 'ab')
        self.proc = subprocess.Popen(
            [sys.executable, '-m', 'cyborg_nova.cmd.conductor',
             '--config-file', self.config],
            stdout=subprocess.PIPE, stderr=self._stderr, cwd=self.workdir,
            env=dict(os.environ, PYTHONPATH=REPO),
            # Unbuffered: select() must see what read() has not taken.
            bufsize=0)
        deadline = time.monotonic() + timeout
        line = b''
        while not line.endswith(b'\n'):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [],
                                              left)[0]:
                self.stop()
                raise RuntimeError('the conductor did not start:\n%s'
                                   % self.log())
            char = self.proc.stdout.read(1)
            if not char:
                raise RuntimeError('the conductor exited (%s):\n%s' % (
                    self.proc.wait(), self.log()))
            line += char
        assert line.startswith(b'listening '), line
        self.url = line.split()[1].decode()
        return self

    def stop(self, sig=signal.SIGTERM):
        """SIGTERM, as an init system stops it; the exit status.

        :param sig: another signal (SIGKILL: a crash).
        """
        if self.proc is None:
            return None
        self.proc.send_signal(sig)
        try:
            code = self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.proc.stdout.close()
        self._stderr.close()
        self.proc = None
        return code

    def log(self):
        """The service's log file so far."""
        try:
            with open(self.log_file) as f:
                return f.read()
        except FileNotFoundError:
            return ''

    def call(self, method, path, token=ADMIN, body=None, raw=None,
             content_type='application/json', timeout=30):
        """``(status, JSON body, response headers)`` of one request."""
        data = raw if raw is not None else (
            json.dumps(body).encode() if body is not None else None)
        request = urllib.request.Request(self.url + path, data=data,
                                         method=method)
        if token:
            request.add_header('X-Auth-Token', token)
        if data is not None:
            request.add_header('Content-Type', content_type)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as resp:
                return resp.status, json.loads(resp.read()), resp.headers
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, json.loads(exc.read()), exc.headers


def plain_http_status(port, path, token):
    """The status plain HTTP gets on ``port``, or the error it meets."""
    plain = http.client.HTTPConnection('127.0.0.1', port, timeout=10)
    try:
        plain.request('GET', path, headers={'X-Auth-Token': token})
        return plain.getresponse().status
    except (http.client.HTTPException, OSError) as exc:
        return repr(exc)
    finally:
        plain.close()
