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

"""The bitstream parsers under atheris, a coverage-guided fuzzer.

libFuzzer (through atheris) mutates a corpus seeded with real GBS and
xclbin2 headers and manifests, keeping the inputs that reach new code.
Each target runs in its own process (libFuzzer exits when it is done)
for a fixed number of runs; libFuzzer's own count is printed.
"""

import json
import os
import re
import subprocess
import sys

import pytest

from tests import fuzzing
from tests.unit.fuzz import test_bitstreams

TARGET = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      'atheris_bitstreams.py')
TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

try:
    import atheris  # noqa: F401
    HAVE_ATHERIS = True
except ImportError:
    HAVE_ATHERIS = False


def corpus(directory, target):
    os.makedirs(directory)
    if target == 'parse':
        seeds = test_bitstreams.SEEDS
    else:
        seeds = [json.dumps({'bitstreams': {
            'nlb3': {'file': 'intel/nlb3.gbs', 'description': 'NLB'},
            'u250': {'file': 'u250.xclbin'}}}).encode(), b'{}']
    for n, data in enumerate(seeds):
        with open(os.path.join(directory, 'seed%d' % n), 'wb') as f:
            f.write(data)
    return directory


@pytest.mark.skipif(not HAVE_ATHERIS, reason='atheris is not installed '
                    '(pip install atheris; see test-requirements.txt)')
@pytest.mark.parametrize('target, runs', [('parse', 100000),
                                          ('manifest', 5000)])
def test_atheris_finds_no_crash(tmp_path, target, runs):
    runs = fuzzing.examples(runs)
    seeds = corpus(str(tmp_path / 'corpus'), target)
    proc = subprocess.run(
        [sys.executable, TARGET, target, '-runs=%d' % runs, '-seed=1',
         '-max_len=4096', '-timeout=20', '-rss_limit_mb=1024',
         '-artifact_prefix=%s/' % tmp_path, seeds],
        cwd=str(tmp_path), capture_output=True, text=True, timeout=600,
        env=dict(os.environ, PYTHONPATH=TOP))
    assert proc.returncode == 0, proc.stderr[-4000:]
    done = re.search(r'Done (\d+) runs in (\d+) second', proc.stderr)
    assert done, proc.stderr[-2000:]
    covered = re.findall(r'cov: (\d+)', proc.stderr)
    fuzzing.report('atheris bitstreams.%s' % target, int(done.group(1)),
                   seconds=done.group(2),
                   edges_covered=covered[-1] if covered else '?')
    assert int(done.group(1)) >= runs
