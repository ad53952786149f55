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

"""What udev_fence_worker.py and aer_fence_worker.py share.

Both build an agent-like worker from the agent's own parts (LocalHost:
HostInventory, the state store and the Fencer) against a real Placement
server, on a umockdev host with NVIDIA GPUs that nova-compute's report
(tools/report_host.py) put in Placement first; each drives its own
scenario. The testbed comes from tests/functional/umockdev_worker.py.

Only the standard library is imported at the top: the agent's modules
are imported once the testbed exists.
"""

import argparse
import os
import subprocess
import sys
import threading
import time

#: How long a worker waits for an event to be handled, in seconds.
WAIT = 10.0
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))))


def parser(nodename):
    """The options of both workers; ``nodename`` is the default one."""
    parser = argparse.ArgumentParser()
    parser.add_argument('--placement', required=True)
    parser.add_argument('--state-dir', required=True)
    parser.add_argument('--source', default='udev')
    parser.add_argument('--nodename', default=nodename,
                        help='a name per run when runs share Placement')
    return parser


def add_gpu(testbed, bridge, address, attributes=()):
    """An NVIDIA T4 (10de:1eb8) bound to nvidia: one PGPU.

    ``attributes`` (names and values) are added to its sysfs attributes.
    """
    return testbed.add_device(
        'pci', address, bridge,
        ['vendor', '0x10de', 'device', '0x1eb8', 'class', '0x030200',
         'subsystem_vendor', '0x10de', 'subsystem_device', '0x12a2',
         'numa_node', '0', 'enable', '1', *attributes],
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


def gpu_host(testbed, args, addresses, attributes=()):
    """A GPU at each address, reported to Placement as nova-compute does.

    Returns the host bridge, the GPUs' testbed paths and the path of the
    state store the report wrote.
    """
    bridge = testbed.add_device('pci', 'pci0000:3a', None, [], [])
    paths = [add_gpu(testbed, bridge, address, attributes)
             for address in addresses]
    state_path = os.path.join(args.state_dir, 'state.sqlite')
    report(args.placement, args.nodename,
           os.path.join(testbed.get_root_dir(), 'sys'), state_path)
    return bridge, paths, state_path


def placement_session():
    """requests to the Placement server, as its admin."""
    import requests

    placement = requests.Session()
    placement.headers.update({'X-Auth-Token': 'admin',
                              'OpenStack-API-Version': 'placement 1.39'})
    return placement


def local_host(args, store, **kwargs):
    """The agent's LocalHost over the testbed's GPUs, fencing Placement.

    ``kwargs`` go to LocalHost as they are.
    """
    from keystoneauth1 import adapter
    from keystoneauth1 import session
    from keystoneauth1 import token_endpoint
    from oslo_config import cfg

    from cyborg_drivers import loader
    from cyborg_nova.agent import host as agent_host
    from cyborg_nova import fencing

    conf = cfg.ConfigOpts()
    conf([])
    client = adapter.Adapter(
        session.Session(auth=token_endpoint.Token(args.placement, 'admin')),
        service_type='placement')
    # /sys is umockdev's tree here: plain reads are redirected to it.
    return agent_host.LocalHost(
        loader.load(conf, ['nvidia_gpu']), '/sys', store, args.nodename,
        fencing.Fencer(client), auto_ready=True, **kwargs)


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

    def wait(self, find):
        """What ``find`` returns once it returns something, or None."""
        with self.cond:
            return self.cond.wait_for(find, WAIT)
