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

"""Real processes for the agent's functional tests.

:class:`AgentProcess` runs ``python -m cyborg_nova.cmd.agent`` with a
config file written from a dict; :func:`report_host` fills Placement the
way nova-compute does (tools/report_host.py); :func:`run_umockdev_worker`
runs a worker script under umockdev-wrapper; :class:`Placement` talks to
the real Placement server of ``placement_fixture``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import unittest

import fixtures
import requests

from tests.functional import umockdev_worker

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
TOOLS = os.path.join(REPO_ROOT, 'tools')

ADMIN = 'agent-admin-token'
READER = 'agent-reader-token'
NODENAME = 'compute-agent-1'


def env() -> dict:
    """This environment with the repository first on PYTHONPATH."""
    environ = dict(os.environ)
    environ['PYTHONPATH'] = os.pathsep.join(
        p for p in (REPO_ROOT, environ.get('PYTHONPATH')) if p)
    return environ


def write_config(path: str, sections: dict) -> str:
    with open(path, 'w') as f:
        for section, options in sections.items():
            f.write('[%s]\n' % section)
            for key, value in options.items():
                f.write('%s = %s\n' % (key, value))
    return path


def report_host(placement: str, nodename: str, sysfs_root: str,
                state_path: str) -> None:
    """One resource tracker update, as nova-compute makes it."""
    proc = subprocess.run(
        [sys.executable, os.path.join(TOOLS, 'report_host.py'),
         '--placement', placement, '--nodename', nodename,
         '--sysfs-root', sysfs_root, '--state-path', state_path],
        env=env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def run_umockdev_worker(worker: str, *args: str) -> dict:
    """The JSON of ``worker`` (a script here) run under umockdev-wrapper.

    Skips the test when a dependency is missing.
    """
    wrapper = shutil.which('umockdev-wrapper')
    if wrapper is None:
        raise unittest.SkipTest('umockdev-wrapper not found (Debian '
                                'package umockdev)')
    proc = subprocess.run(
        [wrapper, sys.executable, os.path.join(HERE, worker), *args],
        cwd=REPO_ROOT, env=env(), capture_output=True, text=True,
        timeout=180)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode == umockdev_worker.SKIP_STATUS:
        raise unittest.SkipTest(json.loads(lines[-1])['skip'])
    assert proc.returncode == 0 and lines, (
        'worker failed (%s)\nstdout:\n%s\nstderr:\n%s'
        % (proc.returncode, proc.stdout, proc.stderr))
    return json.loads(lines[-1])


def wait_for(predicate, timeout: float = 15.0, interval: float = 0.1,
             what: str = 'condition'):
    """Poll ``predicate`` until it returns something true; return that."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError('timed out after %.0f s waiting for %s'
                                 % (timeout, what))
        time.sleep(interval)


class Placement:
    """A little client of the real Placement (noauth2, token admin)."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.session = requests.Session()
        self.session.headers.update({
            'X-Auth-Token': 'admin',
            'OpenStack-API-Version': 'placement 1.39'})

    def get(self, path: str) -> dict:
        resp = self.session.get(self.endpoint + path, timeout=10)
        resp.raise_for_status()
        return resp.json()

    def inventories(self, uuid: str) -> dict:
        return self.get('/resource_providers/%s/inventories'
                        % uuid)['inventories']

    def traits(self, uuid: str) -> list:
        return sorted(self.get('/resource_providers/%s/traits'
                               % uuid)['traits'])

    def allocate(self, consumer: str, uuid: str, resources: dict) -> None:
        resp = self.session.put(
            self.endpoint + '/allocations/%s' % consumer, timeout=10,
            json={'allocations': {uuid: {'resources': resources}},
                  'project_id': 'p' * 32, 'user_id': 'u' * 32,
                  'consumer_generation': None, 'consumer_type': 'INSTANCE'})
        assert resp.status_code == 204, resp.text

    def deallocate(self, consumer: str) -> None:
        resp = self.session.delete(
            self.endpoint + '/allocations/%s' % consumer, timeout=10)
        assert resp.status_code in (204, 404), resp.text


class AgentProcess(fixtures.Fixture):
    """cyborg-nova-agent in a subprocess, serving on a free port.

    ``url`` is its API; its log goes to ``log_path`` (shown in failures).
    """

    #: Seconds until it says it listens (much longer in an emulated VM).
    start_timeout = 60

    def __init__(self, directory: str, sections: dict,
                 name: str = 'agent', command: list | None = None,
                 environ: dict | None = None) -> None:
        """An agent to start in ``directory`` with config ``sections``.

        ``command``: what runs the agent (its arguments follow), by
        default ``python -m cyborg_nova.cmd.agent``; ``environ``:
        added to its environment.
        """
        super().__init__()
        self.directory = directory
        self.name = name
        self.command = command or [sys.executable, '-m',
                                   'cyborg_nova.cmd.agent']
        self.environ = dict(env(), **(environ or {}))
        base = {
            'DEFAULT': {'debug': 'True'},
            'cyborg_agent': {'bind_host': '127.0.0.1', 'bind_port': '0',
                             'admin_token': ADMIN, 'reader_token': READER,
                             'nodename': NODENAME, 'watch_udev': 'False'},
        }
        for section, options in sections.items():
            base.setdefault(section, {}).update(options)
        self.config = write_config(
            os.path.join(directory, '%s.conf' % name), base)
        self.log_path = os.path.join(directory, '%s.log' % name)
        self.session = requests.Session()
        self.session.trust_env = False

    def _setUp(self) -> None:
        self._log = open(self.log_path, 'w')
        self.proc = subprocess.Popen(
            self.command + ['--config-file', self.config],
            stdout=subprocess.PIPE, stderr=self._log, text=True,
            env=self.environ, cwd=REPO_ROOT)
        self.addCleanup(self._stop)
        line = _readline(self.proc.stdout, self.start_timeout)
        if not line.startswith('listening '):
            raise RuntimeError('agent did not start (%r); log:\n%s'
                               % (line, self.log()))
        self.url = line.split()[1]

    def log(self) -> str:
        with open(self.log_path) as f:
            return f.read()

    def call(self, method: str, path: str, token: str | None = ADMIN,
             **kwargs) -> requests.Response:
        headers = kwargs.pop('headers', {})
        if token:
            headers['X-Auth-Token'] = token
        return self.session.request(method, self.url + path,
                                    headers=headers, timeout=30, **kwargs)

    def hardware(self) -> list[dict]:
        resp = self.call('GET', '/hardware', READER)
        assert resp.status_code == 200, resp.text
        return resp.json()['hardware']

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> int:
        """Send ``sig``; the exit status (killed if it hangs)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError('agent did not stop on signal %d'
                                     % sig)
        return self.proc.returncode

    def _stop(self) -> None:
        try:
            self.stop()
        finally:
            self.proc.stdout.close()
            self._log.close()


def _readline(stream, timeout: float) -> str:
    """One line of ``stream``, or '' after ``timeout`` seconds."""
    box = []
    reader = threading.Thread(target=lambda: box.append(stream.readline()),
                              daemon=True)
    reader.start()
    reader.join(timeout)
    return box[0] if box else ''


class DriverProcess(fixtures.Fixture):
    """fake_remote_driver.py, registered with an agent."""

    def __init__(self, agent_url: str, port: int = 0, devices: int = 2,
                 type_: str = 'CRYPTO') -> None:
        super().__init__()
        self.args = ['--agent', agent_url, '--token', ADMIN, '--port',
                     str(port), '--devices', str(devices), '--type', type_]
        self.lines: list[str] = []
        self._cond = threading.Condition()

    def _setUp(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, 'fake_remote_driver.py')]
            + self.args, stdout=subprocess.PIPE, text=True, env=env())
        self.addCleanup(self.kill)
        threading.Thread(target=self._read, daemon=True).start()
        line = self.wait_line(lambda s: s.startswith('listening '), 30)
        self.url = line.split()[1]

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.strip())
                self._cond.notify_all()

    def wait_line(self, match, timeout: float = 15) -> str:
        with self._cond:
            found = self._cond.wait_for(
                lambda: next((s for s in self.lines if match(s)), None),
                timeout)
        if not found:
            raise AssertionError('driver printed no matching line: %s'
                                 % self.lines)
        return found

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
