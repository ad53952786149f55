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

"""A fatal PCIe error on the igb NIC's link fences it (inside L1).

QEMU injects a Data Link Protocol error (uncorrectable, fatal) into the
root port the igb sits behind, at this test's request (run-l1.sh's
aer_inject.py). L1's own AER driver takes the root port's message:
it counts the error in the port's ``aer_dev_fatal``, then recovers the
link (a secondary bus reset), sending the ``ERROR_EVENT`` uevents of the
recovery for the igb's functions. A real ``cyborg-nova-agent`` watching
L1's udevd handles them, reads the port's counters as the igb's link's,
and fences the igb's provider in the host's Placement.

Run last in L1: the reset the kernel's recovery makes may leave the NIC
unlike the other tests need it.
"""

import json
import os
import re
import subprocess
import time

from cyborg_drivers import aer
from tests.realkernel.inside_udev import agent  # noqa: F401 (a fixture)
from tests.realkernel.inside_udev import nic
from tests.realkernel import l1


def fatal_count(address: str) -> int:
    lines = dict(line.rsplit(' ', 1) for line in l1.read(
        '%s/%s/aer_dev_fatal' % (l1.DEVICES, address)).splitlines())
    return int(lines['TOTAL_ERR_FATAL'])


def inject(name: str) -> dict:
    """Have QEMU inject error ``name``; its answer."""
    request = os.path.join(l1.RUN, 'aer-inject')
    with open(request + '.part', 'w') as f:
        f.write(name)
    os.rename(request + '.part', request)
    answer = os.path.join(l1.RUN, 'aer-injected')

    def answered():
        try:
            with open(answer) as f:
                return json.load(f)
        except (FileNotFoundError, ValueError):
            return None
    reply = l1.wait_for(answered, timeout=60, interval=0.05,
                        what='QEMU injecting %s' % name)
    os.unlink(answer)
    return reply


def test_a_fatal_error_on_the_link_fences_the_device(agent):  # noqa: F811
    pf = l1.pf(l1.IGB)
    port = aer.upstream_port(l1.DEVICES, pf)
    assert port is not None, 'no PCIe port above %s' % pf
    assert os.path.exists('%s/%s/aer_dev_fatal' % (l1.DEVICES, port))
    uuid = l1.provider(pf)
    l1.wait_for(lambda: nic(uuid)['reserved'] == 0, timeout=120,
                interval=0.1, what='the igb in service first')
    before = fatal_count(port)
    # A port signals a system error only with SERR# enabled in its
    # Command register, which a server's firmware sets and L1's minimal
    # BIOS (qboot) does not.
    subprocess.run(['setpci', '-s', port, 'COMMAND=0100:0100'], check=True)
    started = time.monotonic()
    reply = inject('igb-port-fatal')
    # QEMU's monitor: "OK id: rp2 root bus: ...".
    assert reply['reply'].get('return', '').startswith('OK'), reply
    l1.wait_for(lambda: fatal_count(port) > before, timeout=120,
                interval=0.05, what="L1's kernel counting the error")
    counted = l1.elapsed(started)
    fenced = l1.wait_for(
        lambda: nic(uuid)['reserved'] == nic(uuid)['total'] and nic(uuid),
        timeout=120, interval=0.05,
        what='the provider fenced:\n' + agent.log())
    l1.record('aer_link_error_counted_s', counted)
    l1.record('aer_link_error_to_fenced_s', l1.elapsed(started))
    assert fenced['total'] == 2
    log = agent.log()
    # The kernel's recovery events brought it in (there is no periodic
    # discovery), and the reason names the port.
    events = recovery_events(log)
    assert events, log
    assert ('fatal error(s) on %s (the PCIe port above the device)'
            % port) in log, log
    l1.record('aer_recovery_events', [e[1:] for e in events])
    fence = next(at for at, line in stamped(log)
                 if '(fenced)' in line and at >= events[0][0])
    l1.record('aer_recovery_uevent_to_reserved_ms',
              round((fence - events[0][0]) * 1000, 1))


def stamped(log: str) -> list[tuple[float, str]]:
    """(seconds of the day, line) of each timestamped line of a log."""
    found = []
    for line in log.splitlines():
        stamp = re.match(r'\S+ (\d+):(\d+):([\d.]+) ', line)
        if stamp:
            h, m, sec = stamp.groups()
            found.append(((int(h) * 60 + int(m)) * 60 + float(sec), line))
    return found


def recovery_events(log: str) -> list[tuple[float, str, str]]:
    """(when, ERROR_EVENT, address) of each recovery uevent handled."""
    found = []
    for at, line in stamped(log):
        event = re.search(r'PCIe error recovery event (\w+) on (\S+)',
                          line)
        if event:
            found.append((at,) + event.groups())
    return found
