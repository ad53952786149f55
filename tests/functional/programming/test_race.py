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

"""Allocations from another process racing a reprogramming.

Fifty allocation attempts (``PUT /allocations``, another process, a real
Placement) against the provider of the FPGA being reprogrammed: none
lands between the fence and the unfence, whatever the timing; an FPGA
that holds one is refused, naming the instance.
"""

import json
import os
import subprocess
import sys

from tests.functional.agent import base as agent_base
from tests.functional.programming import base
from tests.unit.programming import fakes

HERE = os.path.dirname(os.path.abspath(__file__))
PAC0 = fakes.PAC0


def start_program(host, delay):
    return subprocess.Popen(
        [sys.executable, '-m', 'cyborg_nova.cmd.program', '--config-file',
         host.conf, 'program', '--nodename', host.nodename, '--device',
         PAC0, '--bitstream', 'intel/nlb3.gbs', '-f', 'json'],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(agent_base.env(), FAKE_FPGA_DELAY=str(delay)),
        cwd=base.REPO)


def allocator(host, *args):
    return subprocess.Popen(
        [sys.executable, os.path.join(HERE, 'allocator.py'),
         host.placement_url, host.uuid(PAC0), host.state_path] + list(args),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=agent_base.env())


def finish(proc, timeout=120):
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def window(host):
    (job,) = host.jobs()
    steps = dict((s[0], s[1]) for s in job['steps'])
    return job, steps['fenced'], steps.get('unfencing',
                                           steps.get('rolling-back'))


def landed_inside(records, fenced, unfenced):
    """Allocations that surely landed while the device was fenced."""
    return [r for r in records if r['status'] == 204
            and r['sent'] > fenced and r['received'] < unfenced]


def test_fifty_attempts_while_fenced_all_refused(host):
    program = start_program(host, delay=5)
    attempts = allocator(host, '--attempts', '50', '--mode', 'during')
    rc, out, err = finish(attempts)
    assert rc == 0, err
    records = json.loads(out)
    rc, out, err = finish(program)
    assert rc == 0, err
    job, fenced, unfenced = window(host)
    assert job['status'] == 'succeeded'
    assert len(records) == 50
    assert all(r['sent'] > fenced for r in records)
    # Placement refused every attempt it answered before the unfence
    # (nearly all: the test Placement answers one request at a time).
    inside = [r for r in records if r['received'] < unfenced]
    assert len(inside) >= 40, (unfenced, records)
    assert {r['status'] for r in inside} == {409}
    assert landed_inside(records, fenced, unfenced) == []
    assert all(r['received'] > unfenced
               for r in records if r['status'] == 204)
    assert base.check_consistent(host, PAC0) == 'programmed'
    # Unfenced: the next one lands.
    host.deallocate(host.allocate(PAC0))


def test_attempts_racing_the_fence_never_land_inside(host):
    # Attempts spread over the whole programming, each landing one held
    # for a moment: some land before the fence, some after the unfence,
    # none in between; if one is held at the check, the job is refused
    # and names it.
    attempts = allocator(host, '--attempts', '50', '--mode', 'spread',
                         '--spread', '5', '--hold', '0.05')
    program = start_program(host, delay=2)
    rc, out, err = finish(attempts)
    assert rc == 0, err
    records = json.loads(out)
    rc, out, err = finish(program)
    job, fenced, unfenced = window(host)
    assert landed_inside(records, fenced, unfenced) == []
    inside = [r for r in records if fenced < r['sent']
              and r['received'] < unfenced]
    assert {r['status'] for r in inside} <= {409}
    if job['status'] == 'refused':
        assert rc == 1
        named = [r['consumer'] for r in records
                 if r['consumer'] in job['error']]
        assert named, job['error']
        assert base.check_consistent(host, PAC0) == 'unchanged'
    else:
        assert job['status'] == 'succeeded', (job, err)
        assert base.check_consistent(host, PAC0) == 'programmed'
    before = [r for r in records if r['received'] < fenced]
    after = [r for r in records if r['sent'] > unfenced]
    print('\n%d attempts: %d before the fence (%d landed), %d inside the '
          'fenced window of %.2f s (all refused), %d after the unfence (%d '
          'landed); job %s' % (
              len(records), len(before),
              sum(r['status'] == 204 for r in before), len(inside),
              unfenced - fenced, len(after),
              sum(r['status'] == 204 for r in after), job['status']))
    if job['status'] == 'succeeded':
        assert inside, 'no attempt fell inside the fenced window'


def test_allocated_fpga_refused_naming_the_instance(host):
    consumer = host.allocate(PAC0)
    rc, out, err = finish(start_program(host, delay=0))
    assert rc == 1
    row = json.loads(out)[0]
    assert row['status'] == 'refused'
    assert 'allocated to instance(s) %s' % consumer in row['error']
    assert base.check_consistent(host, PAC0) == 'unchanged'
    host.deallocate(consumer)


def test_nova_update_mid_programming_keeps_the_fence(host):
    """Nova's update while the bitstream loads keeps the fence.

    It computes reserved = total from the store (state "programming"),
    so it never unfences the device early.
    """
    program = start_program(host, delay=4)
    host.wait_for_step('programming')
    host.report()
    assert host.reserved(PAC0) == 1
    assert host.device_row(PAC0)[0] == 'programming'
    rc, out, err = finish(program)
    assert rc == 0, err
    assert base.check_consistent(host, PAC0) == 'programmed'
    host.report()
    assert base.check_consistent(host, PAC0) == 'programmed'
