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

"""A private RabbitMQ broker on loopback, for the functional tests.

Debian's ``rabbitmq-server`` (installed by ``tools/setup-env.sh test``
when root), started as a node of its own: its name, AMQP port, Erlang
distribution port and epmd are private, and so are its data, logs,
plugins, config and Erlang cookie (``HOME``), all under a temporary
directory. The system's broker, if one runs, is left alone. ``guest``
may log in from loopback, so :attr:`RabbitBroker.url` needs no set-up.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

import fixtures

#: The server script itself (``/usr/sbin/rabbitmq-server`` is a wrapper
#: that switches to the rabbitmq user).
SERVER = '/usr/lib/rabbitmq/bin/rabbitmq-server'


def missing() -> str | None:
    """Why no broker can be started here (None: it can)."""
    if not os.path.exists(SERVER):
        return ('rabbitmq-server is not installed (%s); tools/setup-env.sh '
                'test installs it when run as root' % SERVER)
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(('127.0.0.1', port)) == 0


class RabbitBroker(fixtures.Fixture):
    """One private broker in ``directory``, until cleaned up.

    ``start_seconds``: from starting the server to its AMQP port
    accepting connections.
    """

    #: Seconds the broker may take to start (an emulated VM is slow).
    start_timeout = 180

    def __init__(self, directory: str) -> None:
        super().__init__()
        self.directory = directory
        self.port = free_port()
        self.url = 'rabbit://guest:guest@127.0.0.1:%d/' % self.port
        self.start_seconds: float | None = None

    def _environ(self) -> dict:
        base = self.directory
        os.makedirs(base, exist_ok=True)
        plugins = os.path.join(base, 'enabled_plugins')
        with open(plugins, 'w') as f:
            f.write('[].\n')
        # The system's rabbitmq-env.conf must not rename the node.
        env_file = os.path.join(base, 'rabbitmq-env.conf')
        open(env_file, 'w').close()
        environ = dict(os.environ)
        environ.update(
            HOME=base,
            RABBITMQ_NODENAME='cn-test-%d-%d@localhost' % (os.getpid(),
                                                           self.port),
            RABBITMQ_NODE_IP_ADDRESS='127.0.0.1',
            RABBITMQ_NODE_PORT=str(self.port),
            RABBITMQ_DIST_PORT=str(free_port()),
            ERL_EPMD_PORT=str(free_port()),
            ERL_EPMD_ADDRESS='127.0.0.1',
            RABBITMQ_CONF_ENV_FILE=env_file,
            RABBITMQ_MNESIA_BASE=os.path.join(base, 'mnesia'),
            RABBITMQ_LOG_BASE=os.path.join(base, 'log'),
            RABBITMQ_ENABLED_PLUGINS_FILE=plugins,
            RABBITMQ_CONFIG_FILE=os.path.join(base, 'rabbitmq'),
            RABBITMQ_ADVANCED_CONFIG_FILE=os.path.join(base, 'advanced'),
            RABBITMQ_PID_FILE=os.path.join(base, 'rabbit.pid'))
        return environ

    def _setUp(self) -> None:
        self.environ = self._environ()
        self.log_path = os.path.join(self.directory, 'server.log')
        started = time.monotonic()
        with open(self.log_path, 'w') as log:
            self.proc = subprocess.Popen(
                [SERVER], env=self.environ, stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        self.addCleanup(self.stop)
        deadline = started + self.start_timeout
        while not port_open(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError('RabbitMQ did not start (exit %s); '
                                   'log:\n%s' % (self.proc.poll(),
                                                 self.log()[-4000:]))
            time.sleep(0.1)
        self.start_seconds = time.monotonic() - started

    def log(self) -> str:
        with open(self.log_path) as f:
            return f.read()

    def stop(self) -> None:
        """Stop the broker and its epmd (idempotent)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        # Erlang starts epmd as a daemon of its own, on the private port:
        # stop exactly that one.
        subprocess.run(['epmd', '-kill'], env=self.environ,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
