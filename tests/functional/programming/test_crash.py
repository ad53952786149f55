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

"""SIGKILL at every journal step, then a restart finishes the job.

The real agent (``cyborg_nova.cmd.agent``) is given a reprogramming
through ``POST /program`` (real Placement, real privsep daemon) and is
killed (SIGKILL) just before or just after one step is journaled; so is
a process running it as ``cyborg-nova program`` does. While nothing
runs, Nova's update cycle keeps a device that was fenced fenced. Then the
agent starts again on the host (or the CLI runs again) and recovers from
the journal. Whatever the step, the device ends programmed, with
matching traits and unfenced, or fenced in the failed state; never
unfenced with traits that do not match what is loaded. Nova's next
update then changes nothing.
"""

import os
import subprocess
import sys

import pytest
import requests

from tests.functional.agent import base as agent_base
from tests.functional.programming import base
from tests.unit.programming import fakes

HERE = os.path.dirname(os.path.abspath(__file__))
PAC0 = fakes.PAC0

# (kill point, environment of the worker, end state)
POINTS = [
    ('after:created', {}, 'programmed'),
    ('after:fencing', {}, 'programmed'),
    ('before:fenced', {}, 'programmed'),
    ('after:fenced', {}, 'programmed'),
    ('after:checked', {}, 'programmed'),
    ('after:programming', {}, 'programmed'),
    ('before:programmed', {}, 'programmed'),
    ('after:programmed', {}, 'programmed'),
    ('after:verified', {}, 'programmed'),
    ('before:traits-swapped', {}, 'programmed'),
    ('after:traits-swapped', {}, 'programmed'),
    ('after:unfencing', {}, 'programmed'),
    ('before:done', {}, 'programmed'),
    # A load that fails, killed on the way to the failed state.
    ('after:failing', {'FAKE_FPGA_FAIL': 'x'}, 'failed'),
    ('before:failed', {'FAKE_FPGA_FAIL': 'x'}, 'failed'),
    # An allocated device, killed while rolling back.
    ('after:rolling-back', 'allocated', 'unchanged'),
    ('before:rolled-back', 'allocated', 'unchanged'),
]


# The kill points at which the device is fenced: the fence is written
# before "fenced" is journaled, the unfence (or the rollback's) after
# "unfencing" ("rolling-back") is; a failing job keeps it fenced.
FENCED_POINTS = {
    'before:fenced', 'after:fenced', 'after:checked', 'after:programming',
    'before:programmed', 'after:programmed', 'after:verified',
    'before:traits-swapped', 'after:traits-swapped', 'after:unfencing',
    'after:failing', 'before:failed', 'after:rolling-back'}


def crash_agent(host, point, env):
    """The agent, given the job, killed at ``point``."""
    agent = host.agent(name='crashing', environ=env, command=[
        sys.executable, os.path.join(HERE, 'crash_worker.py'), 'agent',
        point])
    agent.setUp()
    try:
        try:
            resp = agent.call('POST', '/program', json={
                'device': PAC0, 'bitstream': 'intel/nlb3.gbs'})
            # Killed later than the answer: the job was accepted.
            assert resp.status_code == 202, resp.text
        except (requests.ConnectionError,
                requests.exceptions.ChunkedEncodingError):
            # Killed before its answer was whole (the job was created).
            pass
        agent.proc.wait(60)
        assert agent.proc.returncode == -9, (agent.proc.returncode,
                                             agent.log()[-3000:])
    finally:
        agent.cleanUp()


def crash(host, point, env):
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, 'crash_worker.py'), host.conf,
         host.nodename, PAC0, 'intel/nlb3.gbs', point],
        capture_output=True, text=True, timeout=120,
        env=dict(agent_base.env(), **env))
    assert proc.returncode == -9, (proc.returncode, proc.stdout,
                                   proc.stderr[-3000:])


@pytest.mark.parametrize('point, env, end', POINTS,
                         ids=[p[0] for p in POINTS])
def test_agent_killed_at_each_step_then_restarted(host, point, env, end):
    consumer = None
    if env == 'allocated':
        consumer, env = host.allocate(PAC0), {}
    crash_agent(host, point, env)
    (job,) = host.jobs()
    assert job['status'] == 'running', job
    # Nova's update cycle while no agent runs: it computes reserved from
    # the store, so a device the job had fenced stays fenced.
    fenced = host.reserved(PAC0)
    host.report()
    assert host.reserved(PAC0) == fenced
    if point in FENCED_POINTS:
        assert fenced == host.inventory(PAC0)['total'], job
    if consumer:
        # The instance is gone by the time the agent comes back.
        host.deallocate(consumer)
    agent = host.agent()
    agent.setUp()
    try:
        job = host.wait_finished()
    finally:
        agent.cleanUp()
    assert base.check_consistent(host, PAC0) == end, job
    assert job['status'] == {'programmed': 'succeeded', 'failed': 'failed',
                             'unchanged': 'refused'}[end]
    # Nova's next update computes the same values: nothing changes.
    reserved, traits = host.reserved(PAC0), host.traits(PAC0)
    host.report()
    assert (host.reserved(PAC0), host.traits(PAC0)) == (reserved, traits)
    assert base.check_consistent(host, PAC0) == end


@pytest.mark.parametrize('point', ['after:fenced', 'before:programmed',
                                   'after:traits-swapped'])
def test_killed_then_the_cli_finishes_it_first(host, point):
    crash(host, point, {})
    rc, rows, err = host.program(fakes.PAC1, bitstream='intel/dma.gbs')
    assert rc == 0, err
    assert 'finished interrupted job' in err
    jobs = host.jobs()
    assert [j['status'] for j in jobs] == ['succeeded', 'succeeded']
    assert base.check_consistent(host, PAC0) == 'programmed'
    assert host.loaded(fakes.PAC1) == fakes.hexid(fakes.DMA_AFU)


def test_an_interrupted_load_is_tried_again_once(host):
    # Killed after "programming" is journaled, twice: the second resume
    # does not load a third time, it fails the device.
    crash(host, 'after:programming', {})
    crash_env = {}
    # The worker's recover() resumes the job and dies at the same point.
    proc = subprocess.run(
        [sys.executable, '-c', '''
import argparse, os, signal, sys
sys.path.insert(0, %r)
from cyborg_nova.cmd import cli, program
from cyborg_nova import programming
real = programming.Journal.step
def step(self, job, name, *a, **k):
    result = real(self, job, name, *a, **k)
    if name == 'programming':
        os.kill(os.getpid(), signal.SIGKILL)
    return result
programming.Journal.step = step
app = cli.CyborgNovaApp()
app.conf = cli.load_config([%r])
program.make_programmer(app, argparse.Namespace()).recover()
''' % (base.REPO, host.conf)], capture_output=True, text=True,
        timeout=120, env=dict(agent_base.env(), **crash_env))
    assert proc.returncode == -9, proc.stderr[-2000:]
    (job,) = host.jobs()
    assert job['attempts'] == 2
    agent = host.agent()
    agent.setUp()
    try:
        job = host.wait_finished()
    finally:
        agent.cleanUp()
    assert job['status'] == 'failed'
    assert 'interrupted 2 times' in job['error']
    assert base.check_consistent(host, PAC0) == 'failed'
