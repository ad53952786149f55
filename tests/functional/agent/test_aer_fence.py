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

"""A failed PCIe error recovery's uevent to Placement fenced, under umockdev.

The worker (aer_fence_worker.py) runs under ``umockdev-wrapper``: real
libudev and pyudev, the agent's LocalHost, Fencer and PCIe AER rules,
and the real Placement server of these tests. Skipped, with the reason,
where umockdev is not installed (tools/install-udev-test-deps.sh).
"""

import pytest

from tests import counts
from tests.functional.agent import base

#: As a removal's: fenced within a second of the uevent.
WITHIN_MS = 1000.0


def run_worker(placement: str, state_dir: str, source: str) -> dict:
    """The worker's JSON; skips the test when a dependency is missing."""
    return base.run_umockdev_worker(
        'aer_fence_worker.py', '--placement', placement,
        '--state-dir', state_dir, '--source', source,
        '--nodename', 'aer-%s' % source)


@pytest.mark.parametrize('source', ['udev', 'kernel'])
def test_failed_recovery_with_a_fatal_error_fences_in_placement(
        placement, tmp_path, source):
    result = run_worker(placement.endpoint, str(tmp_path), source)
    healthy = {'reserved': 0, 'total': 1}
    # Nova's report and the agent's first check agree: nothing to write.
    assert result['initial_outcomes'] == ['unchanged', 'unchanged']
    assert result['before'] == {'0000:3b:00.0': healthy,
                                '0000:3c:00.0': healthy}
    assert result['handled'], 'the FAILED_RECOVERY uevent never arrived'
    assert result['fence_ms'] is not None, 'not fenced on the uevent'
    assert result['fence_ms'] < WITHIN_MS, result
    assert result['after']['0000:3b:00.0'] == {'reserved': 1, 'total': 1}
    state, reason = result['states']['0000:3b:00.0']
    assert state == 'unhealthy'
    assert reason == ('PCIe AER: 1 fatal error(s) on 0000:3b:00.0 since '
                      'the kernel began counting')
    # A recovered non-fatal error informs (the default) and does not
    # fence: the other GPU is still offered.
    assert result['other_handled']
    assert result['after']['0000:3c:00.0'] == healthy
    assert result['states']['0000:3c:00.0'][0] == 'ready'
    assert result['effects'] == {
        '0000:3b:00.0': ['fence', reason],
        '0000:3c:00.0': ['inform', result['effects']['0000:3c:00.0'][1]]}
    assert result['effects']['0000:3c:00.0'][1].startswith(
        'PCIe AER: 1 non-fatal error(s) on 0000:3c:00.0')
    counts.record('[%s] PCIe FAILED_RECOVERY uevent to Placement fenced: '
                  '%.1f ms (delivered to the agent in %.1f ms)'
                  % (source, result['fence_ms'], result['delivery_ms']))
