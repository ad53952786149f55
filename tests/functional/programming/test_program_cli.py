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

"""``cyborg-nova program`` end to end: real Placement, real privsep daemon.

Each test's host is fpga-host reported by Nova's report client
(tools/report_host.py); the CLI validates, fences, proves the provider
unallocated, loads through the intel_fpga / xilinx_fpga drivers and the
``sysfs_admin`` daemon (which runs the stand-in tool), verifies in
sysfs, swaps the function trait and unfences.
"""

import json
import os

import pytest

from cyborg_nova import providers
from tests.functional.programming import base
from tests.unit.programming import fakes

PAC0, PAC1, ALVEO = fakes.PAC0, fakes.PAC1, fakes.ALVEO
NLB0_TRAIT = base.function_trait(fakes.NLB0)
NLB3_TRAIT = base.function_trait(fakes.NLB3)


def test_program_swaps_the_function_and_nova_agrees(host):
    before = host.traits(PAC0)
    assert NLB0_TRAIT in before and host.reserved(PAC0) == 0
    rc, rows, err = host.program(PAC0)
    assert rc == 0, err
    (row,) = rows
    assert row['status'] == 'succeeded' and row['step'] == 'done', row
    assert row['function_id'] == fakes.hexid(fakes.NLB3)
    # Loaded through the daemon and the tool, with the card's BDF.
    with open(host.tool_log) as f:
        assert f.read().startswith('fpgaconf --bus 0x5e --device 0x00 '
                                   '--function 0x0 ')
    assert host.loaded(PAC0) == fakes.hexid(fakes.NLB3)
    assert host.traits(PAC0) == (before - {NLB0_TRAIT}) | {NLB3_TRAIT}
    assert host.reserved(PAC0) == 0
    assert base.check_consistent(host, PAC0) == 'programmed'
    # The journal has every step, in order.
    (job,) = host.jobs()
    assert [s[0] for s in job['steps']] == [
        'created', 'fencing', 'fenced', 'checked', 'programming',
        'programmed', 'verified', 'traits-swapped', 'unfencing', 'done']
    # Nova's next update computes the same: nothing to write.
    generation = host.generation(PAC0)
    host.report()
    assert host.generation(PAC0) == generation
    assert host.traits(PAC0) == (before - {NLB0_TRAIT}) | {NLB3_TRAIT}
    # program-show, and device-list shows the device ready again.
    rc, out, err = host.cli('program-show', job['id'], '-f', 'json')
    assert rc == 0, err
    shown = json.loads(out)
    assert shown['status'] == 'succeeded' and shown['device'] == PAC0
    assert len(shown['steps']) == 10


def test_device_named_by_its_provider(host):
    # --device takes the provider's uuid or name as well as the address.
    rc, rows, err = host.program(host.uuid(PAC0))
    assert rc == 0, err
    assert rows[0]['status'] == 'succeeded', rows
    assert host.loaded(PAC0) == fakes.hexid(fakes.NLB3)
    name = providers.provider_name(host.nodename, PAC1)
    rc, rows, err = host.program(name, bitstream='intel/dma.gbs')
    assert rc == 0, err
    assert rows[0]['status'] == 'succeeded', rows
    assert host.loaded(PAC1) == fakes.hexid(fakes.DMA_AFU)
    assert base.check_consistent(host, PAC1) == 'unchanged'
    assert NLB0_TRAIT not in host.traits(PAC1)


def test_xilinx_alveo(host):
    old = base.function_trait(fakes.U250_LOGIC, 'XILINX')
    new = base.function_trait(fakes.XCLBIN_UUID, 'XILINX')
    assert old in host.traits(ALVEO)
    rc, rows, err = host.program(ALVEO, bitstream='u250.xclbin')
    assert rc == 0, err
    assert rows[0]['status'] == 'succeeded'
    traits = host.traits(ALVEO)
    assert new in traits and old not in traits
    with open(host.tool_log) as f:
        assert f.read().startswith('xbmgmt program --device %s --shell '
                                   % ALVEO)


def test_allocated_fpga_is_refused_naming_the_instance(host):
    consumer = host.allocate(PAC0)
    traits = host.traits(PAC0)
    rc, rows, err = host.program(PAC0)
    assert rc == 1
    assert 'Traceback' not in err
    (row,) = rows
    assert row['status'] == 'refused'
    assert consumer in row['error'] and 'nothing was changed' in row['error']
    # Fenced and unfenced again; nothing loaded, traits as they were.
    assert host.reserved(PAC0) == 0
    assert host.traits(PAC0) == traits
    assert host.loaded(PAC0) == fakes.hexid(fakes.NLB0)
    assert not os.path.exists(host.tool_log)
    assert host.device_row(PAC0)[0] == 'ready'
    (job,) = host.jobs()
    assert [s[0] for s in job['steps']] == [
        'created', 'fencing', 'fenced', 'rolling-back', 'rolled-back']
    host.deallocate(consumer)


def test_refused_before_the_fence(host):
    """Incompatible or outside the directory: Placement never written."""
    generation = host.generation(PAC0)
    for name, words in (
            ('intel/other-fim.gbs', 'incompatible'),
            ('u250.xclbin', 'takes a gbs'),
            ('escape.gbs', 'outside the bitstream directory'),
            ('../outside.gbs', '".."'),
            (os.path.join(host.bitstreams, 'intel', 'nlb3.gbs'),
             'absolute path'),
            ('garbage.gbs', 'not a usable bitstream'),
            ('missing.gbs', 'no bitstream')):
        rc, out, err = host.cli('program', '--nodename', host.nodename,
                                '--device', PAC0, '--bitstream', name)
        assert rc == 1, (name, out, err)
        assert words in err and 'Traceback' not in err, (name, err)
        assert len(err.strip().splitlines()) == 1, err
    assert host.generation(PAC0) == generation
    # An xclbin for another shell than the Alveo's.
    generation = host.generation(ALVEO)
    rc, out, err = host.cli('program', '--nodename', host.nodename,
                            '--device', ALVEO, '--bitstream',
                            'other-shell.xclbin')
    assert rc == 1 and 'incompatible' in err, (out, err)
    assert fakes.hexid(fakes.OTHER_INTERFACE) in err, err
    assert 'Traceback' not in err, err
    assert host.generation(ALVEO) == generation
    assert host.jobs() == []
    assert not os.path.exists(host.tool_log)
    rc, out, err = host.cli('program', '--nodename', host.nodename,
                            '--device', '0000:18:00.0', '--bitstream',
                            'intel/nlb3.gbs')
    assert rc == 1 and 'no accelerator 0000:18:00.0' in err


def test_failed_load_leaves_it_fenced_and_marked(host):
    rc, rows, err = host.program(PAC0, env={'FAKE_FPGA_FAIL': 'bad CRC'})
    assert rc == 1
    (row,) = rows
    assert row['status'] == 'failed'
    assert 'PR failed: bad CRC' in row['error']
    assert host.reserved(PAC0) == 1
    assert base.FAILED_TRAIT in host.traits(PAC0)
    state, reason, _ = host.device_row(PAC0)
    assert state == 'failed' and row['job'] in reason
    assert base.check_consistent(host, PAC0) == 'failed'
    # Nova's update keeps it fenced and keeps the trait.
    host.report()
    assert host.reserved(PAC0) == 1
    assert base.FAILED_TRAIT in host.traits(PAC0)
    # device-list shows it.
    rc, out, err = host.cli('device-list', '--nodename', host.nodename,
                            '-f', 'json')
    assert rc == 0, err
    listed = {r['address']: r for r in json.loads(out)}[PAC0]
    assert listed['state'] == 'failed' and row['job'] in listed['reason']
    rc, out, err = host.cli('device-show', PAC0, '--nodename', host.nodename,
                            '-f', 'json')
    assert rc == 0, err
    shown = json.loads(out)
    assert shown['state'] == 'failed' and shown['reserved'] is True
    assert shown['last_program'].startswith('%s failed (failed)'
                                            % row['job'])
    assert 'PR failed: bad CRC' in shown['last_program']
    assert shown['functions'] == ['intel-fpga-dev.0: %s'
                                  % fakes.hexid(fakes.NLB0)]
    rc, out, err = host.cli('device-show', '0000:18:00.0', '--nodename',
                            host.nodename)
    assert rc == 1 and 'no device 0000:18:00.0' in err
    # A good load recovers it: unfenced, ready, the trait gone.
    rc, rows, err = host.program(PAC0)
    assert rc == 0, err
    assert host.reserved(PAC0) == 0
    assert base.FAILED_TRAIT not in host.traits(PAC0)
    assert host.device_row(PAC0)[0] == 'ready'
    assert base.check_consistent(host, PAC0) == 'programmed'


def test_a_load_that_did_not_happen_fails_verification(host):
    # The tool says it loaded, sysfs still shows the old function.
    rc, rows, err = host.program(PAC0, env={'FAKE_FPGA_LIE': '1'})
    assert rc == 1
    (row,) = rows
    assert row['status'] == 'failed', row
    assert 'verification failed' in row['error'], row
    assert fakes.hexid(fakes.NLB0) in row['error']
    assert host.loaded(PAC0) == fakes.hexid(fakes.NLB0)
    # Fenced and marked; the function trait is still the loaded one.
    assert base.check_consistent(host, PAC0) == 'failed'
    assert NLB0_TRAIT in host.traits(PAC0)
    assert NLB3_TRAIT not in host.traits(PAC0)
    (job,) = host.jobs()
    assert 'verified' not in [s[0] for s in job['steps']]


def test_timeout_fails_the_job(placement, tmp_path):
    host = base.Host(str(tmp_path), placement.endpoint, program_timeout=1)
    host.report()
    rc, rows, err = host.program(PAC0, env={'FAKE_FPGA_DELAY': '3'})
    assert rc == 1
    assert rows[0]['status'] == 'failed', err
    assert 'did not finish within 1 s' in rows[0]['error']
    assert host.reserved(PAC0) == 1


def test_all_free_in_host_concurrently(host):
    consumer = host.allocate(PAC1)
    rc, rows, err = host.program(extra=['--all-free-in-host'])
    assert rc == 0, err
    by_device = {r['device']: r for r in rows}
    assert by_device[PAC0]['status'] == 'succeeded'
    assert by_device[PAC1]['status'] == 'skipped'
    assert consumer in by_device[PAC1]['error']
    assert ALVEO not in by_device   # the GBS does not fit it
    host.deallocate(consumer)
    # A list: both PACs at once.
    rc, rows, err = host.program(PAC0, PAC1, bitstream='intel/dma.gbs')
    assert rc == 0, err
    assert {r['status'] for r in rows} == {'succeeded'}
    assert host.loaded(PAC1) == fakes.hexid(fakes.DMA_AFU)


def most_at_once(times_path: str) -> int:
    """The most loads that ran at one moment, from the tool's times."""
    with open(times_path) as f:
        spans = [tuple(map(float, line.split()[1:])) for line in f]
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    running = most = 0
    for _, change in edges:
        running += change
        most = max(most, running)
    return most


@pytest.mark.parametrize('bound', [1, 2])
def test_concurrent_loads_stay_within_the_bound(placement, tmp_path, bound):
    # Five PACs, loads of 0.5 s, a daemon with threads for all of them:
    # only the bound limits how many load at once.
    host = base.Host(str(tmp_path), placement.endpoint,
                     profile=fakes.pac_profile(5), privsep_threads=5)
    host.report()
    times = os.path.join(str(tmp_path), 'times')
    rc, rows, err = host.program(
        extra=['--all-free-in-host', '--concurrency', str(bound)],
        env={'FAKE_FPGA_DELAY': '0.5', 'FAKE_FPGA_TIMES': times})
    assert rc == 0, err
    assert [r['status'] for r in rows] == ['succeeded'] * 5, rows
    assert most_at_once(times) == bound
