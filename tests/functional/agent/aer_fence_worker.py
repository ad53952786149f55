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

"""The agent's PCIe error-recovery uevent to Placement, under umockdev.

Usage::

    umockdev-wrapper PYTHON aer_fence_worker.py --placement URL
        --state-dir DIR [--source udev|kernel] [--nodename NAME]

Built as udev_fence_worker.py is (umockdev needs LD_PRELOAD from process
start): the agent's LocalHost, with its Fencer and the PCIe AER rules
(:class:`cyborg_nova.health.AerHealth`, ``[cyborg_aer]`` defaults),
against a real Placement server, on a umockdev host with two NVIDIA
GPUs whose sysfs directories carry the kernel's AER counter files:

1. the host is reported to Placement as nova-compute does
   (tools/report_host.py over the testbed's sysfs tree), which records
   the counts (no errors);
2. the kernel (umockdev) counts a fatal error on the first GPU and sends
   the ``change`` uevent of a failed recovery (``ERROR_EVENT=
   FAILED_RECOVERY``, ``DEVICE_ONLINE=0``), as pci_uevent_ers does: it
   goes through real libudev and pyudev to the PciEventWatcher, and
   LocalHost re-reads the GPU, evaluates its counts and fences it;
3. the second GPU counts a non-fatal error and sends a successful
   recovery's uevent: its effect (by default ``inform``) must not fence.

Prints one JSON object: milliseconds from the uevent to the callback
(``delivery_ms``) and to Placement confirming the fence (``fence_ms``),
what Placement and the state store hold after. Exit status SKIP_STATUS
with {"skip": reason}: a dependency is missing.
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time

SKIP_STATUS = 77
WAIT = 10.0
FAILING = '0000:3b:00.0'
RECOVERING = '0000:3c:00.0'
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


def counters(fatal=0, nonfatal=0):
    """The AER attributes of a function, as the kernel writes them."""
    from tests import aer_sysfs
    return [
        'aer_dev_fatal', aer_sysfs.text('fatal', fatal, CmpltTO=fatal),
        'aer_dev_nonfatal', aer_sysfs.text('nonfatal', nonfatal,
                                           UnsupReq=nonfatal),
        'aer_dev_correctable', aer_sysfs.text('correctable', 0)]


def add_gpu(testbed, bridge, address):
    """An NVIDIA T4 (10de:1eb8) bound to nvidia, with AER: one PGPU."""
    return testbed.add_device(
        'pci', address, bridge,
        ['vendor', '0x10de', 'device', '0x1eb8', 'class', '0x030200',
         'subsystem_vendor', '0x10de', 'subsystem_device', '0x12a2',
         'numa_node', '0', 'enable', '1', *counters()],
        ['PCI_ID', '10DE:1EB8', 'PCI_SUBSYS_ID', '10DE:12A2',
         'PCI_SLOT_NAME', address, 'PCI_CLASS', '30200',
         'DRIVER', 'nvidia'])


def recover(testbed, path, error_event, online, **counts):
    """The kernel's error recovery: counts, then its change uevent.

    The counts are updated when the error is reported, before the
    recovery's uevents (drivers/pci/pcie/aer.c, then err.c).
    """
    names_and_texts = counters(**counts)
    for name, text in zip(names_and_texts[::2], names_and_texts[1::2]):
        testbed.set_attribute(path, name, text)
    testbed.set_property(path, 'ERROR_EVENT', error_event)
    testbed.set_property(path, 'DEVICE_ONLINE', online)
    start = time.monotonic()
    testbed.uevent(path, 'change')
    return start


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

    def wait_handled(self, address, error_event):
        """(event, received, results) of that event, once handled."""
        def find():
            for record in self.records:
                event = record[0]
                if (event.address, event.error_event) == (address,
                                                          error_event):
                    return record
            return None
        with self.cond:
            return self.cond.wait_for(find, WAIT)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument('--placement', required=True)
    parser.add_argument('--state-dir', required=True)
    parser.add_argument('--source', default='udev')
    parser.add_argument('--nodename', default='aer-compute-1',
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
    from cyborg_nova import health
    from cyborg_nova import store as state_store

    bridge = testbed.add_device('pci', 'pci0000:3a', None, [], [])
    failing = add_gpu(testbed, bridge, FAILING)
    recovering = add_gpu(testbed, bridge, RECOVERING)
    state_path = os.path.join(args.state_dir, 'state.sqlite')
    report(args.placement, args.nodename,
           os.path.join(testbed.get_root_dir(), 'sys'), state_path)

    placement = requests.Session()
    placement.headers.update({'X-Auth-Token': 'admin',
                              'OpenStack-API-Version': 'placement 1.39'})

    def holding(address):
        uuid = device_model.device_uuid(args.nodename, address)
        inv = placement.get('%s/resource_providers/%s/inventories' % (
            args.placement, uuid)).json()['inventories']['PGPU']
        return {'reserved': inv['reserved'], 'total': inv['total']}

    conf = cfg.ConfigOpts()
    conf([])
    client = adapter.Adapter(
        session.Session(auth=token_endpoint.Token(args.placement, 'admin')),
        service_type='placement')
    store = state_store.StateStore(state_path)
    # /sys is umockdev's tree here: plain reads are redirected to it.
    host = agent_host.LocalHost(
        loader.load(conf, ['nvidia_gpu']), '/sys', store, args.nodename,
        fencing.Fencer(client), auto_ready=True,
        aer=health.AerHealth(store, health.Policy()))
    host.prime()
    initial = [r.outcome for r in host.refresh()]
    before = {a: holding(a) for a in (FAILING, RECOVERING)}
    recorder = Recorder(host)
    with events.PciEventWatcher(recorder, source=args.source):
        start = recover(testbed, failing, 'FAILED_RECOVERY', '0', fatal=1)
        handled = recorder.wait_handled(FAILING, 'FAILED_RECOVERY')
        fenced = [r for r in (handled[2] if handled else ())
                  if r.address == FAILING and r.outcome == fencing.WRITTEN]
        recover(testbed, recovering, 'SUCCESSFUL_RECOVERY', '1',
                nonfatal=1)
        other = recorder.wait_handled(RECOVERING, 'SUCCESSFUL_RECOVERY')
    rows = store.devices(args.nodename)
    effects = store.aer.effects(args.nodename)
    print(json.dumps({
        'initial_outcomes': initial,
        'before': before,
        'handled': handled is not None,
        'delivery_ms': handled and (handled[1] - start) * 1000,
        'fence_ms': fenced[0].at and (fenced[0].at - start) * 1000
        if fenced else None,
        'after': {a: holding(a) for a in (FAILING, RECOVERING)},
        'other_handled': other is not None,
        'other_outcomes': [r.outcome for r in other[2]] if other else None,
        'states': {a: [rows[a].state, rows[a].reason]
                   for a in (FAILING, RECOVERING)},
        'effects': {a: [e.effect, e.reason] for a, e in effects.items()},
        'source': args.source,
    }))


if __name__ == '__main__':
    main()
