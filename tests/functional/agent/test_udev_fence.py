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

"""udev remove of an allocated GPU to Placement fenced, under umockdev.

The worker (udev_fence_worker.py) runs under ``umockdev-wrapper``: real
libudev and pyudev, the agent's LocalHost and Fencer, and the real
Placement server of these tests. Skipped, with the reason, where umockdev
is not installed (tools/install-udev-test-deps.sh).
"""

import pytest

from tests.functional.agent import base

#: The brief: fenced within a second of the uevent.
WITHIN_MS = 1000.0


def run_worker(placement: str, state_dir: str, rounds: int,
               source: str = 'udev') -> dict:
    """The worker's JSON; skips the test when a dependency is missing."""
    return base.run_umockdev_worker(
        'udev_fence_worker.py', '--placement', placement,
        '--state-dir', state_dir, '--rounds', str(rounds),
        '--source', source, '--nodename', 'udev-%s' % source)


@pytest.mark.parametrize('source', ['udev', 'kernel'])
def test_remove_uevent_fences_the_allocated_provider(placement, tmp_path,
                                                     source):
    result = run_worker(placement.endpoint, str(tmp_path), rounds=2,
                        source=source)
    # Nova's report and the agent's first check agree: nothing to write.
    assert result['initial_outcomes'] == ['unchanged', 'unchanged']
    for n, round_ in enumerate(result['rounds']):
        assert round_['fence_ms'] is not None, 'round %d not fenced' % n
        assert round_['fence_ms'] < WITHIN_MS, round_
        # Fenced, the provider and the instance's allocation kept.
        assert round_['after_remove'] == {'reserved': 1, 'total': 1,
                                          'used': 1}
        # Hot-added back, ready and healthy: schedulable again.
        assert round_['unfence_ms'] is not None
        assert round_['after_add'] == {'reserved': 0, 'total': 1,
                                       'used': 1}
    # The other GPU was never touched.
    assert result['spare'] == {'reserved': 0, 'total': 1, 'used': 0}
    print('\n[%s] uevent to Placement fenced: %s ms'
          % (source, ', '.join('%.1f' % r['fence_ms']
                               for r in result['rounds'])))
