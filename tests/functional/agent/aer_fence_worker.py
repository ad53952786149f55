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

Built as udev_fence_worker.py is, from fence_worker.py (umockdev needs
LD_PRELOAD from process start): the agent's LocalHost, with its Fencer
and the PCIe AER rules (:class:`cyborg_nova.health.AerHealth`,
``[cyborg_aer]`` defaults), against a real Placement server, on a
umockdev host with two NVIDIA GPUs whose sysfs directories carry the
kernel's AER counter files:

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
what Placement and the state store hold after. Exit status
umockdev_worker.SKIP_STATUS with {"skip": reason}: a dependency is
missing.
"""

import json
import time

from tests.functional.agent import fence_worker
from tests.functional import umockdev_worker

FAILING = '0000:3b:00.0'
RECOVERING = '0000:3c:00.0'


def counters(fatal=0, nonfatal=0):
    """The AER attributes of a function, as the kernel writes them."""
    from tests import aer_sysfs
    return [
        'aer_dev_fatal', aer_sysfs.text('fatal', fatal, CmpltTO=fatal),
        'aer_dev_nonfatal', aer_sysfs.text('nonfatal', nonfatal,
                                           UnsupReq=nonfatal),
        'aer_dev_correctable', aer_sysfs.text('correctable', 0)]


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


class Recorder(fence_worker.Recorder):

    def wait_handled(self, address, error_event):
        """(event, received, results) of that event, once handled."""
        def find():
            for record in self.records:
                event = record[0]
                if (event.address, event.error_event) == (address,
                                                          error_event):
                    return record
            return None
        return self.wait(find)


def main(argv=None):
    args = fence_worker.parser('aer-compute-1').parse_args(argv)
    testbed = umockdev_worker.testbed()

    from cyborg_drivers import device as device_model
    from cyborg_drivers import events
    from cyborg_nova import fencing
    from cyborg_nova import health
    from cyborg_nova import store as state_store

    # The GPUs' sysfs directories carry the AER counter files.
    _bridge, (failing, recovering), state_path = fence_worker.gpu_host(
        testbed, args, (FAILING, RECOVERING), counters())

    placement = fence_worker.placement_session()

    def holding(address):
        uuid = device_model.device_uuid(args.nodename, address)
        inv = placement.get('%s/resource_providers/%s/inventories' % (
            args.placement, uuid)).json()['inventories']['PGPU']
        return {'reserved': inv['reserved'], 'total': inv['total']}

    store = state_store.StateStore(state_path)
    host = fence_worker.local_host(
        args, store, aer=health.AerHealth(store, health.Policy()))
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
