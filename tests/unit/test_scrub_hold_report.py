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

"""benchmarks/scrub_hold.py's report, from what its in-L1 part writes.

The measurement itself needs the nested VM (a few minutes of boot); its
recorded run is benchmarks/results/scrub-hold.json, and this reads it
back into the report the benchmark prints.
"""

import importlib.util
import json
import os

import pytest

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def scrub_hold():
    spec = importlib.util.spec_from_file_location(
        'scrub_hold', os.path.join(TOP, 'benchmarks', 'scrub_hold.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_recorded_run_reports_each_family_against_its_reset():
    bench = scrub_hold()
    with open(os.path.join(TOP, 'benchmarks', 'results',
                           'scrub-hold.json')) as f:
        data = json.load(f)
    # Every case, with all its steps and the reset alone.
    assert sorted((r['driver'], r['steps']) for r in data['results']) == [
        ('generic', 'flr'), ('generic', 'nvme_format+flr'),
        ('nic_sriov', 'flr'), ('nic_sriov', 'vf_settings+flr')]
    text = bench.report(data, 150.0, 'QEMU emulator version 10.0.2')
    rows = [line for line in text.splitlines() if line.startswith('| ')]
    erase = [r for r in rows if '`nvme_format+flr`' in r]
    assert len(erase) == 1
    cells = [c.strip() for c in erase[0].strip('|').split('|')]
    held = [r['held_s'] for r in data['results']
            if r['steps'] == 'nvme_format+flr'][0]
    assert cells[2] == str(len(held))
    assert float(cells[4]) == pytest.approx(min(held), abs=0.001)
    added = [r for r in rows if r.startswith('| NVMe VF') and ' s |' in r
             and '`' not in r]
    assert len(added) == 1
    # The NVMe erase itself ran in the recorded rounds.
    last = [r['last_done'] for r in data['results']
            if r['steps'] == 'nvme_format+flr'][0]
    assert last[0].startswith('nvme_format: erased namespace ')


def test_rounds_below_one_are_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        scrub_hold().main(['--rounds', '0'])
    assert exc.value.code == 2
    assert '--rounds must be at least 1' in capsys.readouterr().err
