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

"""Real uevents fence a provider in the host's Placement (inside L1).

The host is reported to the host's Placement by the resource tracker's
code path (Nova's report client); a real ``cyborg-nova-agent`` watches
L1's udevd. The igb PF's VFs are then taken to 0 and back through the
privsep daemon: the kernel removes and adds the VF devices, udev
announces it, and the agent writes ``reserved`` of the PF's provider
(all of it while the PF has no VFs, none once they are back), never its
total.
"""

import os
import re
import time

import pytest

from tests.functional.agent import base as agent_base
from tests.realkernel import l1


class Agent(agent_base.AgentProcess):
    # Importing the agent under TCG takes tens of seconds.
    start_timeout = l1.SLOW


@pytest.fixture(scope='module')
def agent():
    l1.reported()
    sections = l1.sections()
    sections['cyborg_agent'] = {
        'nodename': l1.NODENAME, 'watch_udev': 'True', 'fence': 'True',
        # Only udev events bring changes in: no periodic discovery.
        'discovery_interval': '0'}
    sections['oslo_messaging_notifications'] = {'driver': 'log'}
    process = Agent(l1.WORK, sections, name='agent')
    process.setUp()
    yield process
    process.cleanUp()
    with open(process.log_path) as f, open(
            os.path.join(l1.RUN, 'agent.log'), 'w') as out:
        out.write(f.read())


def fence_causes(log: str) -> list[tuple[str, str, str, float]]:
    """(action, address, fenced|unfenced, ms) of each ``reserved`` write.

    The action and address are those of the last PCI event the agent
    logged before the write; ms is the time between the two log lines.
    """
    found, last = [], None
    for line in log.splitlines():
        stamp = re.match(r'\S+ (\d+):(\d+):([\d.]+) ', line)
        if stamp is None:
            continue
        h, m, sec = stamp.groups()
        at = (int(h) * 60 + int(m)) * 60 + float(sec)
        event = re.search(r'PCI (\w+) of (\S+):', line)
        if event:
            last = event.groups() + (at,)
        write = re.search(r'reserved \d+ of \d+ on provider \S+ '
                          r'\((fenced|unfenced)\)', line)
        if write and last:
            found.append(last[:2] + write.groups()
                         + (round((at - last[2]) * 1000, 1),))
    return found


def nic(uuid: str) -> dict:
    return l1.placement().inventories(uuid)['CUSTOM_NIC']


def test_reported_as_nova_compute_reports_it():
    pf = l1.pf(l1.IGB)
    inventory = nic(l1.provider(pf))
    assert (inventory['total'], inventory['reserved']) == (2, 0)
    nvme = l1.placement().inventories(l1.provider(l1.pf(l1.NVME)))
    assert nvme['CUSTOM_NVME_FN']['total'] == 2


def test_vfs_gone_fence_and_back_unfence(agent, pci):
    pf = l1.pf(l1.IGB)
    uuid = l1.provider(pf)
    assert nic(uuid)['reserved'] == 0
    started = time.monotonic()
    pci.set_num_vfs(pf, 0)
    fenced = l1.wait_for(lambda: nic(uuid)['reserved'] == 2 and nic(uuid),
                         timeout=120, interval=0.05,
                         what='the provider fenced:\n' + agent.log())
    l1.record('fence_after_vfs_removed_s', l1.elapsed(started))
    # Fenced: nothing can land on it; the total is Nova's to change.
    assert fenced['total'] == 2
    assert l1.vfs(pf) == []

    started = time.monotonic()
    pci.set_num_vfs(pf, 2)
    l1.wait_vfs(pf, 2)
    l1.wait_for(lambda: nic(uuid)['reserved'] == 0, timeout=120,
                interval=0.05, what='the provider unfenced:\n' + agent.log())
    l1.record('unfence_after_vfs_back_s', l1.elapsed(started))
    assert nic(uuid)['total'] == 2
    # Uevents of the VFs brought both changes in (there is no periodic
    # discovery): the kernel unbinds igbvf from each VF, then removes it,
    # and adds them back; the first event that changes the PF fences it.
    log = agent.log()
    events = fence_causes(log)
    assert [e[2] for e in events] == ['fenced', 'unfenced'], log
    vfs = set(l1.vfs(pf))
    assert events[0][0] in ('unbind', 'remove') and events[0][1] in vfs
    assert events[1][0] in ('add', 'bind') and events[1][1] in vfs
    # From the uevent's handling to Placement's answer, in L1's emulated
    # CPU.
    l1.record('uevent_to_reserved_written_ms', events)
