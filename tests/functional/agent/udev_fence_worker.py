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
NVIDIA GPUs:

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
Exit status SKIP_STATUS with {"skip": reason}: a dependency is missing.
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import uuid

SKIP_STATUS = 77
WAIT = 10.0
ALLOCATED = '0000:3b:00.0'
SPARE = '0000:3c:00.0'
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))))


def _skip(reason):
    print(json.dumps({'skip': reason}))
    sys.exit(SKIP_STATUS)


def _testbed():
    try:
        import gi
        gi.require_version('UMockdev', '1.0')
        from gi.repository import UMockdev
    except (ImportError, ValueError) as e:
        _skip('UMockdev typelib or PyGObject not available (%s)' % e)
    if 'libumockdev-preload' not in os.environ.get('LD_PRELOAD', ''):
        # Not a skip: without the preload this would watch the real host.
        sys.exit('not running under umockdev-wrapper')
    # Before any udev monitor exists: an earlier one hears nothing.
    testbed = UMockdev.Testbed.new()
    try:
        import pyudev
        pyudev.Context()
    except (ImportError, OSError) as e:
        _skip('pyudev/libudev not usable (%s)' % e)
    return testbed


def add_gpu(testbed, bridge, address):
    """An NVIDIA T4 (10de:1eb8) bound to nvidia: one PGPU."""
    return testbed.add_device(
        'pci', address, bridge,
        ['vendor', '0x10de', 'device', '0x1eb8', 'class', '0x030200',
         'subsystem_vendor', '0x10de', 'subsystem_device', '0x12a2',
         'numa_node', '0', 'enable', '1'],
        ['PCI_ID', '10DE:1EB8', 'PCI_SUBSYS_ID', '10DE:12A2',
         'PCI_SLOT_NAME', address, 'PCI_CLASS', '30200',
         'DRIVER', 'nvidia'])


def report(placement, nodename, sysfs_root, state_path):
    # Without the preload: report_host reads the testbed's files by
    # their real path, and must not hear the testbed's uevents.
    env = {k: v for k, v in os.environ.items() if k != 'LD_PRELOAD'}
    env['PYTHONPATH'] = os.pathsep.join(
        p for p in (REPO_ROOT, env.get('PYTHONPATH')) if p)
    subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, 'tools', 'report_host.py'),
         '--placement', placement, '--nodename', nodename,
         '--sysfs-root', sysfs_root, '--state-path', state_path,
         '--drivers', 'nvidia_gpu'],
        check=True, env=env, capture_output=True, timeout=120)


class Recorder:
    """The watcher's callback: hands each event to LocalHost, times it."""

    def __init__(self, host):
        self.host = host
        self.records = []
        self.cond = threading.Condition()

    def __call__(self, event):
        received = time.monotonic()
        results = self.host.handle_event(event)
        with self.cond:
            self.records.append((event, received, results))
            self.cond.notify_all()

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
        with self.cond:
            return self.cond.wait_for(find, WAIT)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument('--placement', required=True)
    parser.add_argument('--state-dir', required=True)
    parser.add_argument('--rounds', type=int, default=1)
    parser.add_argument('--source', default='udev')
    parser.add_argument('--nodename', default='udev-compute-1',
                        help='a name per run when runs share Placement')
    args = parser.parse_args(argv)
    testbed = _testbed()

    from keystoneauth1 import adapter
    from keystoneauth1 import session
    from keystoneauth1 import token_endpoint
    from oslo_config import cfg
    import requests

    from cyborg_drivers import device as device_model
    from cyborg_drivers import events
    from cyborg_drivers import loader
    from cyborg_nova.agent import host as agent_host
    from cyborg_nova import fencing
    from cyborg_nova import store as state_store

    bridge = testbed.add_device('pci', 'pci0000:3a', None, [], [])
    path = add_gpu(testbed, bridge, ALLOCATED)
    add_gpu(testbed, bridge, SPARE)
    state_path = os.path.join(args.state_dir, 'state.sqlite')
    report(args.placement, args.nodename,
           os.path.join(testbed.get_root_dir(), 'sys'), state_path)

    placement = requests.Session()
    placement.headers.update({'X-Auth-Token': 'admin',
                              'OpenStack-API-Version': 'placement 1.39'})
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

    conf = cfg.ConfigOpts()
    conf([])
    client = adapter.Adapter(
        session.Session(auth=token_endpoint.Token(args.placement, 'admin')),
        service_type='placement')
    # /sys is umockdev's tree here: plain reads are redirected to it.
    host = agent_host.LocalHost(
        loader.load(conf, ['nvidia_gpu']), '/sys',
        state_store.StateStore(state_path), args.nodename,
        fencing.Fencer(client), auto_ready=True)
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
            path = add_gpu(testbed, bridge, ALLOCATED)
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
