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
"""kill -9 during a scrub, then a restart: nothing handed out half-scrubbed.

A real process (``python -m tests.scrubhost``) scrubs a freed VF of a
fake host and hangs inside the function reset; it is killed with
SIGKILL there. The unit stays held (reserved, never given); the next
scrubber (nova-compute's at its restart does the same) finds the dead
owner, runs the scrub again from the first step and frees it, or, when
the reset fails then, keeps it held and fences the device.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from cyborg_nova import assignments
from cyborg_nova import scrub
from cyborg_nova import store as state_store
from tests import scrubhost

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def killed_mid_scrub(directory):
    """A unit freed and a scrubber killed inside its reset; the unit."""
    host = scrubhost.Host(directory)
    (unit,) = host.give_and_free('tenant-a', 1)
    marker = os.path.join(directory, 'resetting')
    proc = subprocess.Popen([sys.executable, '-m', 'tests.scrubhost',
                             directory, 'hang'], cwd=TOP)
    try:
        for _ in range(600):
            if os.path.exists(marker) or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert os.path.exists(marker), 'the scrubber never reset the unit'
        with open(marker) as f:
            assert f.read() == unit
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    return host, unit, proc.pid


@pytest.mark.parametrize('reset_fails', [False, True])
def test_a_scrub_killed_mid_reset_is_finished_or_fenced(tmp_path,
                                                        reset_fails):
    host, unit, pid = killed_mid_scrub(str(tmp_path))
    hold = host.store.units.hold(unit)
    assert (hold.state, hold.owner) == (
        'scrubbing', '%d@%s' % (pid, scrub.this_process().split('@')[1]))
    # Held across the crash: reserved, and no consumer can be given it.
    assert host.store.units.kept() == {host.dc.provider: 1}
    with pytest.raises(assignments.NoFreeUnits):
        host.books.assign('tenant-b', host.dc.provider,
                          host.dc.accelerator.units, 16)
    # The next scrubber (a restarted nova-compute's) takes it over.
    ops = scrubhost.TreeOps(host.root, fail=[unit] if reset_fails else ())
    (outcome,) = host.scrubber(ops).run()
    if reset_fails:
        assert outcome.result == scrub.FAILED
        assert host.store.units.hold(unit).state == 'failed'
        assert host.store.devices(scrubhost.NODE)[
            scrubhost.DC_PF].state == state_store.FAILED
        with pytest.raises(assignments.NoFreeUnits):
            host.books.assign('tenant-b', host.dc.provider,
                              host.dc.accelerator.units, 16)
    else:
        assert outcome.result == scrub.FREE
        assert ops.resets == [unit]
        assert host.store.units.holds() == []
        given = host.books.assign('tenant-b', host.dc.provider,
                                  host.dc.accelerator.units, 16)
        assert unit in given
    # The store came through the kill whole.
    with host.store._connect() as db:
        assert db.execute('PRAGMA integrity_check').fetchone()[0] == 'ok'
