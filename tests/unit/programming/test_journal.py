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

"""The programming journal, the job locks and validation (no Placement)."""

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time

import jsonschema
from oslo_messaging.notify import _impl_test
import pytest

from cyborg_drivers.fake import hosttree
from cyborg_drivers import loader
from cyborg_nova import notifications
from cyborg_nova import programming
from cyborg_nova.programming.steps import dispatch
from cyborg_nova import store as state_store
from tests.unit.programming import fakes
from tests.unit import test_notifications


def job(**fields):
    now = time.time()
    values = dict(
        id='j1', nodename='n1', address=fakes.PAC0, provider='p',
        driver='intel_fpga', region='intel-fpga-dev.0', bitstream='a.gbs',
        kind='gbs', interface_id='i' * 32, function_id='f' * 32,
        old_function_id=None, prev_state='ready', prev_reason=None,
        target_state='ready', step=programming.CREATED,
        status=programming.RUNNING, error=None, attempts=0, owner='me',
        created_at=now, updated_at=now, finished_at=None)
    values.update(fields)
    return programming.Job(**values)


@pytest.fixture
def journal(tmp_path):
    return programming.Journal(state_store.StateStore(
        str(tmp_path / 'state.sqlite')))


def test_steps_are_journaled_in_order(journal):
    journal.create(job())
    first = journal.get('j1')
    assert [s[0] for s in first.steps] == [programming.CREATED]
    second = journal.step(first, programming.FENCING)
    assert second.step == programming.FENCING
    third = journal.step(second, programming.DONE, detail='x',
                         status=programming.SUCCEEDED)
    stored = journal.get('j1')
    assert stored == third
    assert [s[0] for s in stored.steps] == [
        programming.CREATED, programming.FENCING, programming.DONE]
    assert stored.finished and stored.finished_at == stored.updated_at
    assert stored.step_time(programming.FENCING) == second.updated_at
    assert journal.unfinished() == []
    assert stored.to_dict()['steps'][-1]['detail'] == 'x'


def test_one_running_job_per_device(journal):
    journal.create(job())
    with pytest.raises(programming.Refused,
                       match='being programmed by job j1') as caught:
        journal.create(job(id='j2'))
    assert caught.value.code == 409
    # Another device, or the same once the first finished, is fine.
    journal.create(job(id='j3', address=fakes.PAC1))
    journal.step(journal.get('j1'), programming.FAILED_STEP,
                 status=programming.FAILED)
    journal.create(job(id='j2'))
    with pytest.raises(programming.Refused, match='exists already'):
        journal.create(job(id='j2', address='0000:00:00.0'))
    assert [j.id for j in journal.unfinished()] == ['j3', 'j2']
    assert journal.active('n1', fakes.PAC0).id == 'j2'
    assert [j.id for j in journal.jobs('n1', fakes.PAC0)] == ['j2', 'j1']


def test_a_job_lock_is_freed_when_its_process_dies(tmp_path):
    code = textwrap.dedent('''
        import sys, time
        sys.path.insert(0, %r)
        from cyborg_nova import programming
        lock = programming.JobLock(%r, 'j1')
        assert lock.acquire()
        print('held', flush=True)
        time.sleep(60)
    ''' % (os.getcwd(), str(tmp_path)))
    child = subprocess.Popen([sys.executable, '-c', code],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == 'held'
        lock = programming.JobLock(str(tmp_path), 'j1')
        assert not lock.acquire(blocking=False)
        child.send_signal(signal.SIGKILL)
        child.wait()
        assert lock.acquire(blocking=False)
        # Two holders in one process exclude each other too.
        assert not programming.JobLock(str(tmp_path), 'j1').acquire(
            blocking=False)
        lock.release(remove=True)
        assert not os.path.exists(lock.path)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        child.stdout.close()


@pytest.fixture
def programmer(tmp_path):
    root = str(tmp_path / 'sys')
    hosttree.build_tree('fpga-host', root)
    conf = fakes.config(str(tmp_path / 'nova.conf'), {'cyborg_nova': {
        'bitstream_dir': fakes.library(str(tmp_path / 'bitstreams'))}})
    store = state_store.StateStore(str(tmp_path / 'state.sqlite'))
    drivers = loader.load(conf, ['intel_fpga', 'xilinx_fpga',
                                 'nvidia_gpu'])
    return programming.Programmer(conf, store, None, drivers, root)


def test_plan_of_a_compatible_bitstream(programmer):
    plan = programmer.plan('n1', fakes.PAC0, 'intel/nlb3.gbs')
    assert plan.accelerator.address == fakes.PAC0
    assert plan.region.name == 'intel-fpga-dev.0'
    assert plan.header.function_id == fakes.hexid(fakes.NLB3)
    # By provider uuid and provider name too.
    from cyborg_nova import providers
    for name in (providers.provider_uuid('n1', fakes.ALVEO),
                 providers.provider_name('n1', fakes.ALVEO)):
        assert programmer.plan('n1', name, 'u250.xclbin').accelerator \
            .address == fakes.ALVEO


@pytest.mark.parametrize('device, name, code, words', [
    (fakes.PAC0, '/srv/nlb3.gbs', 400, 'absolute path'),
    (fakes.PAC0, '../outside.gbs', 400, '".."'),
    (fakes.PAC0, 'escape.gbs', 409, 'outside the bitstream directory'),
    (fakes.PAC0, 'nope.gbs', 404, 'no bitstream'),
    (fakes.PAC0, 'garbage.gbs', 409, 'not a usable bitstream'),
    (fakes.PAC0, 'intel/other-fim.gbs', 409, 'incompatible'),
    (fakes.PAC0, 'u250.xclbin', 409, 'takes a gbs'),
    (fakes.ALVEO, 'intel/nlb3.gbs', 409, 'takes a xclbin'),
    ('0000:99:00.0', 'intel/nlb3.gbs', 404, 'no accelerator'),
])
def test_plan_refusals(programmer, device, name, code, words):
    with pytest.raises(programming.Refused, match=words) as caught:
        programmer.plan('n1', device, name)
    assert caught.value.code == code


def test_nothing_without_placement(programmer):
    with pytest.raises(programming.Refused, match='needs Placement'):
        programmer.program('n1', fakes.PAC0, 'intel/nlb3.gbs')
    assert programmer.journal.jobs() == []


def _job(programmer):
    plan = programmer.plan('cn1', fakes.PAC0, 'intel/nlb3.gbs')
    programmer.store.sync('cn1', [plan.accelerator], state_store.READY)
    now = time.time()
    return programming.Job(
        id='job-1', nodename='cn1', address=fakes.PAC0, provider='p',
        driver='intel_fpga', region=plan.region.name,
        bitstream='intel/nlb3.gbs', kind=plan.header.kind,
        interface_id=plan.header.interface_id,
        function_id=plan.header.function_id,
        old_function_id=plan.region.function_id, prev_state='ready',
        prev_reason=None, target_state='ready', step=programming.CREATED,
        status=programming.RUNNING, error=None, attempts=0, owner=None,
        created_at=now, updated_at=now, finished_at=None,
        steps=((programming.CREATED, now, None),))


@pytest.mark.parametrize('status', [programming.SUCCEEDED,
                                    programming.FAILED])
def test_a_succeeded_job_notifies_programmed(programmer, monkeypatch,
                                             tmp_path, status):
    _impl_test.reset()
    programmer.notifier = test_notifications.notifier('test')
    job = _job(programmer)
    # The steps themselves (Placement, the load) are the functional
    # tests'; here the job just ends with ``status``.
    monkeypatch.setattr(dispatch, 'advance', lambda ctx, j: (
        dataclasses.replace(j, status=status, step=programming.DONE)))
    lock = programming.JobLock(str(tmp_path), job.id)
    lock.acquire()
    done = programmer._run(job, lock)
    assert done.status == status
    if status == programming.FAILED:
        assert _impl_test.NOTIFICATIONS == []
        return
    ((ctxt, message, priority, retry),) = _impl_test.NOTIFICATIONS
    assert (priority, retry) == ('INFO', notifications.DEFAULT_RETRY)
    assert message['event_type'] == 'accelerator.programmed'
    body = message['payload']
    jsonschema.validate(body, notifications.PAYLOAD_SCHEMA)
    data = body['cyborg_nova_object.data']
    assert (data['address'], data['state']) == (fakes.PAC0, 'ready')
    assert data['programming'] == {
        'job': 'job-1', 'region': job.region, 'bitstream': 'intel/nlb3.gbs',
        'function_id': fakes.hexid(fakes.NLB3),
        'previous_function_id': job.old_function_id}
