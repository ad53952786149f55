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

"""cyborg-nova-driver, a real agent and a real Placement, end to end.

A driver process serves intel_qat over its own fake sysfs tree and says
hello to a real agent process; its devices land in the host's state
store, nova-compute's update (tools/report_host.py, the resource
tracker's code path) reports them as providers; killing the driver with
SIGKILL fences them within the agent's down time (threshold x interval),
restarting it unfences them, and nova-compute's updates in between keep
what the agent wrote.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from cyborg_drivers.fake import hosttree
from cyborg_nova import remote_devices
from cyborg_nova import store as state_store
from tests.functional.agent import base
from tests.functional.agent import conftest

#: [cyborg_agent] driver_poll_interval x driver_failure_threshold of
#: the agent (tests/functional/agent/conftest.py).
DOWN_TIME = 1 * 2
QAT_PFS = ['0000:6b:00.0', '0000:70:00.0', '0000:e8:00.0']


class DriverProcess:
    """``python -m cyborg_nova.cmd.driver`` serving intel_qat."""

    def __init__(self, directory, agent_url, sysfs_root):
        self.log_path = os.path.join(directory, 'driver.log')
        self.command = [
            sys.executable, '-m', 'cyborg_nova.cmd.driver',
            '--driver', 'intel_qat', '--agent-url', agent_url,
            '--sysfs-root', sysfs_root, '--nodename', base.NODENAME,
            '--hello-interval', '2', '--debug']
        self.proc = None

    def start(self):
        self._log = open(self.log_path, 'a')
        environ = dict(base.env(), CYBORG_NOVA_AGENT_TOKEN=base.ADMIN)
        self.proc = subprocess.Popen(
            self.command, stdout=subprocess.PIPE, stderr=self._log,
            text=True, env=environ, cwd=base.REPO_ROOT)
        line = base._readline(self.proc.stdout, 60)
        assert line.startswith('listening '), (line, self.log())
        self.url = line.split()[1]

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.proc.stdout.close()
        self._log.close()

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(15)
            self.proc.stdout.close()
            self._log.close()

    def log(self):
        with open(self.log_path) as f:
            return f.read()


@pytest.fixture
def remote_host(placement, tmp_path):
    host = conftest.Host(str(tmp_path / 'host'), placement.endpoint)
    host.agent.setUp()
    tree = str(tmp_path / 'driver-sys')
    hosttree.build_tree('crypto-nic-host', tree)
    driver = DriverProcess(str(tmp_path), host.agent.url, tree)
    yield host, driver
    driver.stop()
    host.agent.cleanUp()


def recorded(host):
    store = state_store.StateStore(host.state_path)
    return store.remote.of_node(base.NODENAME)


def reserved(host, uuids):
    """{uuid: [(reserved, total)...]} of the providers in Placement."""
    return {u: [(r['reserved'], r['total'])
                for r in host.placement.inventories(u).values()]
            for u in uuids}


def all_fenced(host, uuids):
    return all(res == total for records in reserved(host, uuids).values()
               for res, total in records)


def none_fenced(host, uuids):
    return all(res == 0 for records in reserved(host, uuids).values()
               for res, total in records)


def test_driver_registers_is_fenced_when_killed_and_unfenced(remote_host):
    host, driver = remote_host
    driver.start()
    rows = base.wait_for(
        lambda: [r for r in recorded(host) if r.state == 'UP'
                 and len(r.hardware) == len(QAT_PFS)],
        what='the driver\'s devices in the store')
    assert rows[0].endpoint == driver.url
    assert sorted(e['pci']['address'] for e in rows[0].hardware) == QAT_PFS
    # The agent lists them as remote, with what Placement needs.
    listed = [h for h in host.agent.hardware() if h['acc_specs']['remote']]
    assert sorted(h['pci']['address'] for h in listed) == QAT_PFS

    # nova-compute's update reports them as children of the node.
    base.report_host(host.placement.endpoint, base.NODENAME,
                     host.sysfs_root, host.state_path)
    uuids = [remote_devices.provider_uuid(base.NODENAME, a)
             for a in QAT_PFS]
    for uuid, address in zip(uuids, QAT_PFS):
        provider = host.placement.get('/resource_providers/%s' % uuid)
        assert provider['name'] == remote_devices.provider_name(
            base.NODENAME, address)
        assert 'CUSTOM_QAT' in host.placement.inventories(uuid)
        assert 'COMPUTE_ACCELERATOR' not in host.placement.traits(uuid)
        assert 'OWNER_CYBORG' in host.placement.traits(uuid)
    assert none_fenced(host, uuids)

    killed = time.monotonic()
    driver.kill()
    base.wait_for(lambda: all_fenced(host, uuids), timeout=DOWN_TIME + 10,
                  interval=0.05, what='the remote providers fenced')
    fence_time = time.monotonic() - killed
    print('fenced %.2f s after SIGKILL (down time %d s)'
          % (fence_time, DOWN_TIME))
    # The kill can fall just after a poll, and this host runs other
    # tests: some slack on top of the down time.
    assert fence_time <= DOWN_TIME + 2.0, fence_time
    assert [r.state for r in recorded(host)] == ['DOWN']

    # nova-compute's next update computes the same: still fenced.
    base.report_host(host.placement.endpoint, base.NODENAME,
                     host.sysfs_root, host.state_path)
    assert all_fenced(host, uuids)

    restarted = time.monotonic()
    driver.start()
    base.wait_for(lambda: none_fenced(host, uuids), timeout=30,
                  interval=0.05, what='the remote providers unfenced')
    print('unfenced %.2f s after the restart'
          % (time.monotonic() - restarted))
    base.report_host(host.placement.endpoint, base.NODENAME,
                     host.sysfs_root, host.state_path)
    assert none_fenced(host, uuids)
    # Restarted on another free port: a new endpoint, UP, whose devices
    # win over those recorded for the old, DOWN, one.
    states = {r.endpoint: r.state for r in recorded(host)}
    assert states[driver.url] == 'UP'
    assert sorted(states.values()) == ['DOWN', 'UP']
