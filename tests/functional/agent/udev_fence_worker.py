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

"""The agent's udev-to-Placement path under umockdev, for tests and bench.

Usage::

    umockdev-wrapper PYTHON udev_fence_worker.py --placement URL
        --state-dir DIR [--rounds N] [--source udev|kernel]

umockdev needs LD_PRELOAD from process start, so this runs in its own
process (see tests/functional/udev). It builds an agent-like worker from
the agent's own parts (LocalHost: HostInventory, the state store and the
Fencer) against a real Placement server, on a umockdev host with two
NVIDIA GPUs (what it shares with aer_fence_worker.py is in
fence_worker.py):

1. the host is reported to Placement as nova-compute does
   (tools/report_host.py over the testbed's sysfs tree);
2. an instance is given the first GPU (a real allocation);
3. each round, the kernel (umockdev) announces that GPU's removal: the
   uevent goes through real libudev and pyudev to the PciEventWatcher,
   LocalHost re-discovers the device and the Fencer writes Placement;
   then the GPU is hot-added back, which unfences it.

Prints one JSON object: per round, milliseconds from the uevent to the
callback (``delivery_ms``) and to Placement confirming the write
(``fence_ms``, ``unfence_ms``), and what Placement held after each step.
Exit status umockdev_worker.SKIP_STATUS with {"skip": reason}: a
dependency is missing.
"""

import json
import time
import uuid

from tests.functional.agent import fence_worker
from tests.functional import umockdev_worker

ALLOCATED = '0000:3b:00.0'
SPARE = '0000:3c:00.0'


class Recorder(fence_worker.Recorder):

    def wait_written(self, action, address, since):
        """(received, result) of the first write for ``action``."""
        from cyborg_nova import fencing

        def find():
            for event, received, results in self.records[since:]:
                if event.action != action:
                    continue
                for result in results:
                    if (result.address == address
                            and result.outcome == fencing.WRITTEN):
                        return received, result
            return None
        return self.wait(find)


def main(argv=None):
    parser = fence_worker.parser('udev-compute-1')
    parser.add_argument('--rounds', type=int, default=1)
    args = parser.parse_args(argv)
    testbed = umockdev_worker.testbed()

    from cyborg_drivers import device as device_model
    from cyborg_drivers import events
    from cyborg_nova import store as state_store

    bridge, (path, _spare), state_path = fence_worker.gpu_host(
        testbed, args, (ALLOCATED, SPARE))

    placement = fence_worker.placement_session()
    rp = device_model.device_uuid(args.nodename, ALLOCATED)
    spare_rp = device_model.device_uuid(args.nodename, SPARE)
    consumer = str(uuid.uuid4())
    resp = placement.put(
        '%s/allocations/%s' % (args.placement, consumer),
        json={'allocations': {rp: {'resources': {'PGPU': 1}}},
              'project_id': 'p' * 32, 'user_id': 'u' * 32,
              'consumer_generation': None, 'consumer_type': 'INSTANCE'})
    assert resp.status_code == 204, resp.text

    def holding(uuid):
        base = '%s/resource_providers/%s' % (args.placement, uuid)
        inv = placement.get(base + '/inventories').json()['inventories']
        used = placement.get(base + '/usages').json()['usages']
        return {'reserved': inv['PGPU']['reserved'],
                'total': inv['PGPU']['total'], 'used': used.get('PGPU')}

    host = fence_worker.local_host(args, state_store.StateStore(state_path))
    host.prime()
    initial = [r.outcome for r in host.refresh()]
    recorder = Recorder(host)
    rounds = []
    with events.PciEventWatcher(recorder, source=args.source):
        for _ in range(args.rounds):
            since = len(recorder.records)
            start = time.monotonic()
            # The kernel announces a removal before the device is gone.
            testbed.uevent(path, 'remove')
            testbed.remove_device(path)
            fenced = recorder.wait_written('remove', ALLOCATED, since)
            after_remove = holding(rp)

            since = len(recorder.records)
            back = time.monotonic()
            path = fence_worker.add_gpu(testbed, bridge, ALLOCATED)
            unfenced = recorder.wait_written('add', ALLOCATED, since)
            rounds.append({
                'delivery_ms': fenced and (fenced[0] - start) * 1000,
                'fence_ms': fenced and (fenced[1].at - start) * 1000,
                'unfence_ms': unfenced and (unfenced[1].at - back) * 1000,
                'after_remove': after_remove,
                'after_add': holding(rp),
            })
    print(json.dumps({
        'initial_outcomes': initial,
        'rounds': rounds,
        'spare': holding(spare_rp),
        'listed': [a.address for a in host.accelerators()],
        'source': args.source,
    }))


if __name__ == '__main__':
    main()
