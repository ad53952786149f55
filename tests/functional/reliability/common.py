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

"""What the reliability tests read back and the processes they run."""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time

import requests

from tests.functional.agent import base as agent_base
from tests.functional.programming import base

HERE = os.path.dirname(os.path.abspath(__file__))


def snapshot(host: base.Host) -> dict:
    """The host's provider tree in Placement, without generations.

    ``{provider name: {'parent': name, 'inventories': {...}, 'traits':
    [...]}}``; what two converged updates must agree on.
    """
    (root,) = host.get('/resource_providers?name=%s'
                       % host.nodename)['resource_providers']
    rps = host.get('/resource_providers?in_tree=%s'
                   % root['uuid'])['resource_providers']
    names = {rp['uuid']: rp['name'] for rp in rps}
    tree = {}
    for rp in rps:
        path = '/resource_providers/%s' % rp['uuid']
        tree[rp['name']] = {
            'parent': names.get(rp['parent_provider_uuid']),
            'inventories': host.get(path + '/inventories')['inventories'],
            'traits': sorted(host.get(path + '/traits')['traits']),
        }
    return tree


def allocations(host: base.Host, consumer: str) -> dict:
    """``{rp uuid: resources}`` of ``consumer``."""
    body = host.get('/allocations/%s' % consumer)
    return {rp: a['resources'] for rp, a in body['allocations'].items()}


def raised_by_us(cycle: dict) -> bool:
    """Whether a failed cycle's error was raised in this project's code."""
    innermost = cycle['where'][-1] if cycle['where'] else ''
    return any('%s%s%s' % (os.sep, package, os.sep) in innermost
               for package in ('cyborg_nova', 'cyborg_drivers'))


class UpdateWorker:
    """update_worker.py for ``host``: nova-compute's update, repeated."""

    def __init__(self, host: base.Host, interval: float = 0.05,
                 cycles: int = 0, drivers: str = base.DRIVERS) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, '-W', 'ignore',
             os.path.join(HERE, 'update_worker.py'),
             '--placement', host.placement_url,
             '--nodename', host.nodename, '--sysfs-root', host.root,
             '--state-path', host.state_path, '--drivers', drivers,
             '--cycles', str(cycles), '--interval', str(interval)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=agent_base.env())
        self.cycles: list[dict] = []
        self._cond = threading.Condition()
        self.stderr = ''
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self._cond:
                self.cycles.append(json.loads(line))
                self._cond.notify_all()

    def _read_err(self) -> None:
        self.stderr = self.proc.stderr.read()

    def wait_ok(self, count: int = 1, timeout: float = 60) -> None:
        """Until ``count`` cycles after now have succeeded."""
        with self._cond:
            start = len(self.cycles)
            done = self._cond.wait_for(
                lambda: sum(c['ok'] for c in self.cycles[start:]) >= count
                or self.proc.poll() is not None, timeout)
        assert done and self.proc.poll() is None, (
            self.proc.poll(), self.cycles[start:], self.stderr[-3000:])

    def wait_cycles(self, count: int, timeout: float = 60) -> None:
        with self._cond:
            assert self._cond.wait_for(
                lambda: len(self.cycles) >= count
                or self.proc.poll() is not None, timeout)
        assert len(self.cycles) >= count, (self.proc.poll(),
                                           self.stderr[-3000:])

    def kill(self, sig: int = signal.SIGKILL) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(30)


class Hooked:
    """A keystoneauth adapter that runs actions around its requests.

    :meth:`on` adds ``action`` to run before (or once answered, after)
    the ``nth`` request of ``METHOD`` whose url holds ``fragment``; each
    fires once. An action run before a request that returns an
    exception has it raised instead of the request being sent (a fault
    the client sees). Both ``request(url, method)`` and
    ``get(url)``-style calls are seen. Everything else is the real
    adapter's. ``sent`` lists every request as ``(monotonic time,
    METHOD, url, answered)``; ``answered`` is False where the client
    raised (Placement unreachable).
    """

    def __init__(self, real) -> None:
        self.real = real
        self.session = getattr(real, 'session', None)
        self.hooks: list[list] = []
        self.sent: list[tuple] = []

    def on(self, when: str, method: str, fragment: str, action,
           nth: int = 1) -> None:
        self.hooks.append([when, method.upper(), fragment, nth, action])

    def pending(self) -> list:
        """The hooks that have not fired."""
        return list(self.hooks)

    def _fire(self, when: str, method: str, url: str) -> None:
        for hook in list(self.hooks):
            if hook[:2] == [when, method.upper()] and hook[2] in url:
                hook[3] -= 1
                if not hook[3]:
                    self.hooks.remove(hook)
                    result = hook[4]()
                    if isinstance(result, Exception):
                        raise result

    def request(self, url, method, **kwargs):
        self._fire('before', method, url)
        sent = time.monotonic()
        try:
            resp = self.real.request(url, method, **kwargs)
        except Exception:
            self.sent.append((sent, method.upper(), url, False))
            raise
        self.sent.append((sent, method.upper(), url, True))
        self._fire('after', method, url)
        return resp

    def __getattr__(self, name):
        if name not in ('get', 'put', 'post', 'delete'):
            return getattr(self.real, name)

        def call(url, **kwargs):
            return self.request(url, name.upper(), **kwargs)
        return call


class TraitWriter:
    """Another writer (an operator's script) changing providers' traits.

    A thread that, until stopped, sets on each provider in turn one
    ``CUSTOM_OPERATOR_<n>`` trait in place of the one it set before,
    keeping every other trait: a read-modify-write guarded by the
    provider's generation, retried on conflicts, as a well-behaved
    client of Placement does. Each write bumps the provider's
    generation under whoever else is writing it. ``last`` is the trait
    it last set on each provider; a lost update would remove it.
    """

    def __init__(self, endpoint: str, uuids: list[str],
                 pause: float = 0.0) -> None:
        self.endpoint = endpoint
        self.uuids = list(uuids)
        self.pause = pause
        self.http = requests.Session()
        self.http.headers.update({'X-Auth-Token': 'admin',
                                  'OpenStack-API-Version':
                                  'placement 1.39'})
        self.last: dict[str, str] = {}
        self.writes = 0
        self.conflicts = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> 'TraitWriter':
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive()
        assert not self.errors, self.errors

    def running(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        # A writer that dies quietly would leave a test waiting for writes
        # that never come: what killed it is an error the test reports.
        try:
            self._write_until_stopped()
        except Exception as exc:
            self.errors.append('%s: %s' % (type(exc).__name__, exc))

    def _write_until_stopped(self) -> None:
        n = 0
        while not self._stop.is_set():
            uuid = self.uuids[n % len(self.uuids)]
            n += 1
            trait = 'CUSTOM_OPERATOR_%d' % n
            self.http.put(self.endpoint + '/traits/' + trait, timeout=30)
            url = self.endpoint + '/resource_providers/%s/traits' % uuid
            for _ in range(100):
                body = self.http.get(url, timeout=30).json()
                traits = [t for t in body['traits']
                          if not t.startswith('CUSTOM_OPERATOR_')]
                resp = self.http.put(url, timeout=30, json={
                    'traits': traits + [trait],
                    'resource_provider_generation': body[
                        'resource_provider_generation']})
                if resp.status_code == 200:
                    self.last[uuid] = trait
                    self.writes += 1
                    break
                if resp.status_code != 409:
                    self.errors.append(resp.text)
                    return
                self.conflicts += 1
            else:
                self.errors.append('100 conflicts in a row on %s' % uuid)
                return
            self._stop.wait(self.pause)

    def wait_writes(self, count: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while self.writes < count and self.running():
            assert time.monotonic() < deadline, (self.writes, count)
            time.sleep(0.05)


def without_operator_traits(tree: dict) -> dict:
    """A :func:`snapshot` without the traits of :class:`TraitWriter`."""
    return {name: dict(rp, traits=[t for t in rp['traits']
                                   if not t.startswith('CUSTOM_OPERATOR_')])
            for name, rp in tree.items()}


class LossyProxy:
    """A proxy in front of Placement that can lose one answer.

    Every request is passed on; the one armed with :meth:`lose` is
    carried out by Placement, and then the connection is closed without
    its answer: what a client sees when Placement (or the network) dies
    between committing a write and answering it.
    """

    def __init__(self, target: str) -> None:
        self.target = target
        self.armed: tuple[str, str] | None = None
        self.lost: list[str] = []
        proxy = self
        forward = requests.Session()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = 'HTTP/1.1'

            def log_message(self, format, *args):
                pass

            def _pass(self):
                length = int(self.headers.get('Content-Length') or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ('host', 'connection',
                                                'content-length')}
                resp = forward.request(self.command,
                                       proxy.target + self.path,
                                       headers=headers, data=body,
                                       timeout=30)
                if proxy.armed and self.command == proxy.armed[0] and (
                        proxy.armed[1] in self.path):
                    proxy.armed = None
                    proxy.lost.append('%s %s -> %s' % (
                        self.command, self.path, resp.status_code))
                    self.close_connection = True
                    return
                self.send_response(resp.status_code)
                for key, value in resp.headers.items():
                    if key.lower() not in ('connection', 'content-length',
                                           'transfer-encoding', 'date',
                                           'server'):
                        self.send_header(key, value)
                self.send_header('Content-Length', str(len(resp.content)))
                self.end_headers()
                self.wfile.write(resp.content)
            do_GET = do_PUT = do_POST = do_DELETE = _pass

        self.server = http.server.ThreadingHTTPServer(('127.0.0.1', 0),
                                                      Handler)
        self.endpoint = 'http://127.0.0.1:%d' % self.server.server_port
        threading.Thread(target=self.server.serve_forever,
                         daemon=True).start()

    def lose(self, method: str, fragment: str) -> None:
        """Lose the answer to the next ``METHOD`` of a url with it."""
        self.armed = (method.upper(), fragment)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
