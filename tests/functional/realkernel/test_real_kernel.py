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

"""The project on a real kernel, with emulated SR-IOV hardware.

Boots L1 (tools/nested/run-l1.sh: Debian's stock kernel in QEMU, an igb
SR-IOV NIC and an NVMe controller with SR-IOV behind an emulated IOMMU)
once for this module, with a real Placement started here on loopback
(L1 reaches it through QEMU's user-mode network). Inside L1,
tools/nested/l1-tests.sh runs tests/realkernel/inside_*.py against L1's
own /sys, udev, privsep daemons, libvirtd and an L2 guest; each test
here asserts what one of those modules proved, from pytest's report in
L1, and what L1 left in this machine's Placement.

Under TCG (this machine's /dev/kvm cannot boot a stock kernel) the whole
run takes minutes; on a machine whose KVM can, run-l1.sh uses it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from tests import counts
from tests.functional.agent import base as agent_base

# A whole cloud or VM: minutes, many more on a loaded machine than the
# test command's limit for one test.
pytestmark = pytest.mark.timeout(3000)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
NESTED = os.path.join(REPO, 'tools', 'nested')
#: L1's budget: boot, the tests and two L2 boots, under TCG on a loaded
#: machine (about 5 minutes on a quiet one).
L1_TIMEOUT = 1800


class L1Run:
    """What one L1 run left: its exit code, directory and test report."""

    def __init__(self, rc: int, run_dir: str, stderr: str) -> None:
        self.rc = rc
        self.dir = run_dir
        self.stderr = stderr
        self.cases = {}
        junit = os.path.join(run_dir, 'junit.xml')
        if os.path.exists(junit):
            for case in ET.parse(junit).getroot().iter('testcase'):
                problems = [e for e in case
                            if e.tag in ('failure', 'error', 'skipped')]
                self.cases[(case.get('classname').rsplit('.', 1)[-1],
                            case.get('name'))] = problems

    def file(self, name: str) -> str:
        try:
            with open(os.path.join(self.dir, name), errors='replace') as f:
                return f.read()
        except OSError:
            return ''

    def measured(self) -> dict:
        text = self.file('measured.json')
        return json.loads(text) if text else {}

    def check(self, module: str, expected: int) -> list[str]:
        """The names of ``module``'s tests; all of them must have passed."""
        cases = {name: problems for (mod, name), problems
                 in self.cases.items() if mod == module}
        context = ('L1 exit code %s, run dir %s\n%s\npytest in L1:\n%s'
                   % (self.rc, self.dir, self.stderr[-2000:],
                      self.file('pytest.log')[-6000:]))
        assert len(cases) >= expected, (
            '%s: %d of %d tests ran\n%s' % (module, len(cases), expected,
                                            context))
        failed = {name: [(p.tag, p.get('message'), (p.text or '')[-3000:])
                         for p in problems]
                  for name, problems in cases.items() if problems}
        assert not failed, '%s in L1: %s\n%s' % (module, failed, context)
        return sorted(cases)


def _setup() -> None:
    proc = subprocess.run([os.path.join(NESTED, 'setup.sh')],
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, (
        'tools/nested/setup.sh failed:\n%s%s' % (proc.stdout[-3000:],
                                                 proc.stderr[-3000:]))


@pytest.fixture(scope='module')
def l1_run(placement) -> L1Run:
    _setup()
    port = placement.endpoint.rsplit(':', 1)[1]
    env = dict(os.environ, NESTED_QUIET='1', L1_REPO=REPO,
               L1_PYTHON=sys.executable,
               L1_PLACEMENT='http://10.0.2.2:%s' % port)
    # A session of its own: whatever happens to this test, the run's
    # QEMU goes with its group.
    proc = subprocess.Popen(
        [os.path.join(NESTED, 'run-l1.sh'), '-d', 'both', '-t',
         str(L1_TIMEOUT), os.path.join(NESTED, 'l1-tests.sh')],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=env, start_new_session=True)
    try:
        _, stderr = proc.communicate(timeout=L1_TIMEOUT + 120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    run_dir = [line.split('run dir ', 1)[1] for line in stderr.splitlines()
               if line.startswith('run-l1: run dir ')]
    assert run_dir, 'run-l1.sh printed no run dir:\n%s' % stderr
    run = L1Run(proc.returncode, run_dir[0], stderr)
    summary = run.file('summary').strip()
    counts.record('real kernel (L1): %s; measured in L1: %s' % (
        summary, json.dumps(run.measured(), sort_keys=True)))
    return run


def test_discovery_on_the_real_kernel(l1_run):
    names = l1_run.check('inside_discovery', 4)
    assert 'test_aer_counts_read_as_the_kernel_shows_them' in names
    assert l1_run.measured()['igb_aer_as_read']


def test_privsep_on_the_real_sysfs(l1_run):
    names = l1_run.check('inside_privsep', 13)
    assert 'test_update_driver_changes_the_vf_count' in names
    assert 'test_vfs_bound_to_vfio_and_back' in names
    # A freed VF scrubbed by L1's kernel: reset, and free again.
    assert 'test_a_freed_vf_is_scrubbed_by_the_kernel' in names
    assert l1_run.measured()['igb_vf_scrub_held_s'] > 0
    # A freed NVMe VF: its private namespace erased by QEMU's controller.
    assert 'test_a_freed_nvme_vf_has_its_namespace_erased' in names
    assert l1_run.measured()['nvme_vf_scrub_held_s'] > 0


def l1_nic(placement) -> dict:
    """The inventory L1's NIC has in this machine's Placement."""
    client = agent_base.Placement(placement.endpoint)
    providers = client.get('/resource_providers')['resource_providers']
    names = {rp['name']: rp['uuid'] for rp in providers}
    assert 'nested-l1' in names, sorted(names)
    nics = [uuid for name, uuid in names.items()
            if name.startswith('nested-l1_accelerator_')
            and 'CUSTOM_NIC' in client.inventories(uuid)]
    assert len(nics) == 1, names
    return client.inventories(nics[0])['CUSTOM_NIC']


def test_uevents_fence_in_this_machines_placement(l1_run, placement):
    l1_run.check('inside_udev', 2)
    # What L1 left here: its compute node and accelerators, reported
    # through this Placement (the NIC fenced and unfenced meanwhile).
    assert l1_nic(placement)['total'] == 2
    measured = l1_run.measured()
    assert measured['fence_after_vfs_removed_s'] > 0
    assert measured['unfence_after_vfs_back_s'] > 0


def test_a_link_error_fences_in_this_machines_placement(l1_run, placement):
    # The last tests in L1: a fatal error injected into the root port
    # above the NIC left it fenced here.
    l1_run.check('inside_aer', 1)
    nic = l1_nic(placement)
    assert (nic['total'], nic['reserved']) == (2, 2)
    measured = l1_run.measured()
    assert measured['aer_link_error_to_fenced_s'] > 0


def test_a_real_guest_gets_the_vf(l1_run):
    names = l1_run.check('inside_guest', 5)
    assert names == sorted([
        'test_spawn_gives_the_allocated_vf',
        'test_hard_reboot_keeps_the_same_vf',
        'test_a_suspend_needs_the_vf_out_of_the_guest',
        'test_live_attach_and_detach_of_a_second_vf',
        'test_a_vf_another_guest_holds_is_refused'])
    # L2's own kernel said what it saw.
    assert 'L2: pci-set begin' in l1_run.file('l2a-console.log')
    # The real libvirt refused to save the guest while it had its VF:
    # why suspend unplugs the units first.
    assert l1_run.measured()['managed_save_with_a_vf_refused']
