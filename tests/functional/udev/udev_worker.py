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

"""Scenarios for test_events.py, run under umockdev-wrapper.

Usage::

    umockdev-wrapper PYTHON udev_worker.py SCENARIO [SOURCE]

umockdev works by LD_PRELOAD, which has to be in place when the process
starts, so these scenarios cannot run inside the pytest process: the test
module runs this script in a subprocess. Each scenario drives a
PciEventWatcher with a umockdev Testbed (real libudev and pyudev, fake
sysfs and uevents) and prints one JSON object on stdout. Exit status
umockdev_worker.SKIP_STATUS with {"skip": reason} means a dependency is
missing (the testbed comes from tests/functional/umockdev_worker.py).
"""

import dataclasses
import json
import logging
import statistics
import sys
import threading
import time

from tests.functional import umockdev_worker

WAIT = 5.0

ADDRESS = '0000:3b:00.0'
OTHER_ADDRESS = '0000:3b:00.1'


class Recorder:
    """A PciEventWatcher callback that keeps what it receives."""

    def __init__(self, raises=False):
        self.raises = raises
        self.received = []  # (monotonic time, PciEvent)
        self._cond = threading.Condition()

    def __call__(self, event):
        with self._cond:
            self.received.append((time.monotonic(), event))
            self._cond.notify_all()
        if self.raises:
            raise RuntimeError('callback failure for %s' % event.address)

    def wait_for(self, action, address, timeout=WAIT):
        """Return (time, event) of the first matching event, or None."""
        def find():
            for item in self.received:
                if (item[1].action, item[1].address) == (action, address):
                    return item
            return None
        with self._cond:
            self._cond.wait_for(find, timeout)
            return find()

    def wait_count(self, count, timeout=WAIT):
        """Wait until count events are in; return whether they are."""
        with self._cond:
            return self._cond.wait_for(
                lambda: len(self.received) >= count, timeout)

    def events(self):
        return [dataclasses.asdict(event) for _t, event in self.received]


class ErrorCounter(logging.Handler):
    def __init__(self):
        super().__init__(logging.ERROR)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def add_pci(testbed, address=ADDRESS, parent=None):
    if parent is None:
        # A real function sits under its host bridge. Umockdev gives the
        # bridge a 'pci' subsystem (real ones have none), so its event
        # also exercises the watcher's own address filter.
        parent = testbed.add_device('pci', 'pci0000:3a', None, [], [])
    return testbed.add_device(
        'pci', address, parent,
        ['vendor', '0x8086', 'device', '0x4940', 'class', '0x0b4000',
         'subsystem_vendor', '0x8086', 'subsystem_device', '0x0000',
         'numa_node', '0', 'enable', '1'],
        ['PCI_ID', '8086:4940', 'PCI_SUBSYS_ID', '8086:0000',
         'PCI_SLOT_NAME', address, 'PCI_CLASS', 'B4000'])


def _ms(start, item):
    return None if item is None else (item[0] - start) * 1000.0


def scenario_add(testbed, events, source):
    recorder = Recorder()
    with events.PciEventWatcher(recorder, source=source):
        bridge = testbed.add_device('pci', 'pci0000:3a', None, [], [])
        start = time.monotonic()
        add_pci(testbed, ADDRESS, bridge)
        got = recorder.wait_for('add', ADDRESS)
    return {'events': recorder.events(), 'latency_ms': _ms(start, got)}


def scenario_change_remove(testbed, events, source):
    recorder = Recorder()
    latency = {}
    with events.PciEventWatcher(recorder, source=source):
        path = add_pci(testbed)
        recorder.wait_for('add', ADDRESS)

        testbed.set_attribute(path, 'numa_node', '1')
        start = time.monotonic()
        testbed.uevent(path, 'change')
        latency['change'] = _ms(start, recorder.wait_for('change', ADDRESS))

        # remove_device() sends no uevent of its own, and afterwards the
        # device is gone: announce the removal first, like the kernel.
        start = time.monotonic()
        testbed.uevent(path, 'remove')
        testbed.remove_device(path)
        latency['remove'] = _ms(start, recorder.wait_for('remove', ADDRESS))
    return {'events': recorder.events(), 'latency_ms': latency}


def scenario_non_pci(testbed, events, source):
    recorder = Recorder()
    with events.PciEventWatcher(recorder, source=source):
        usb = testbed.add_device(
            'usb', '1-1', None,
            ['idVendor', '8086', 'idProduct', '0b40'],
            ['DEVTYPE', 'usb_device', 'PRODUCT', '8086/b40/0'])
        net = testbed.add_device(
            'net', 'eth7', None, ['address', '52:54:00:12:34:56'],
            ['INTERFACE', 'eth7', 'IFINDEX', '7'])
        testbed.uevent(usb, 'change')
        testbed.uevent(net, 'change')
        # Uevents arrive in order: once this one is in, any of the
        # above that were going to be delivered would have been.
        add_pci(testbed)
        recorder.wait_for('add', ADDRESS)
    return {'events': recorder.events()}


def scenario_callback_raises(testbed, events, source):
    errors = ErrorCounter()
    logging.getLogger(events.__name__).addHandler(errors)
    recorder = Recorder(raises=True)
    with events.PciEventWatcher(recorder, source=source) as watcher:
        bridge = testbed.add_device('pci', 'pci0000:3a', None, [], [])
        first = add_pci(testbed, ADDRESS, bridge)
        recorder.wait_for('add', ADDRESS)
        add_pci(testbed, OTHER_ADDRESS, bridge)
        recorder.wait_for('add', OTHER_ADDRESS)
        testbed.uevent(first, 'change')
        recorder.wait_for('change', ADDRESS)
        running = watcher.running
    return {'events': recorder.events(), 'running': running,
            'logged_errors': errors.messages}


def scenario_lifecycle(testbed, events, source):
    stopped = Recorder()
    sentinel = Recorder()
    watcher = events.PciEventWatcher(stopped, source=source)
    watcher.start()
    watcher.start()
    threads_after_two_starts = sum(
        t.name == 'pci-event-watcher' for t in threading.enumerate())
    watcher.stop()
    watcher.stop()
    running_after_stop = watcher.running
    with events.PciEventWatcher(sentinel, source=source):
        add_pci(testbed)
        sentinel_got = sentinel.wait_for('add', ADDRESS) is not None
    return {'threads_after_two_starts': threads_after_two_starts,
            'running_after_stop': running_after_stop,
            'sentinel_got_event': sentinel_got,
            'stopped_events': stopped.events()}


def scenario_latency(testbed, events, source, rounds=50):
    recorder = Recorder()
    samples = []
    with events.PciEventWatcher(recorder, source=source):
        bridge = testbed.add_device('pci', 'pci0000:3a', None, [], [])
        start = time.monotonic()
        path = add_pci(testbed, ADDRESS, bridge)
        add_ms = _ms(start, recorder.wait_for('add', ADDRESS))
        for _ in range(rounds):
            seen = len(recorder.received)
            start = time.monotonic()
            testbed.uevent(path, 'change')
            if recorder.wait_count(seen + 1):
                samples.append(_ms(start, recorder.received[seen]))
    samples.sort()
    return {
        'add_ms': add_ms,
        'change_rounds': rounds,
        'change_received': len(samples),
        'change_ms': {
            'min': samples[0] if samples else None,
            'median': statistics.median(samples) if samples else None,
            'p95': (samples[int(len(samples) * 0.95) - 1]
                    if samples else None),
            'max': samples[-1] if samples else None,
        },
    }


def scenario_inventory(testbed, events, source):
    """uevents re-discover the affected device through HostInventory."""
    from oslo_config import cfg

    from cyborg_drivers import discovery
    from cyborg_drivers import inventory
    from cyborg_drivers import loader

    conf = cfg.ConfigOpts()
    conf([])
    # /sys is umockdev's tree here: plain reads are redirected to it.
    inv = inventory.HostInventory(discovery.Discoverer(
        loader.load(conf, ['intel_qat']), '/sys'))
    changes = []
    applied = threading.Event()

    def on_event(event):
        change = inv.handle_event(event)
        changes.append({
            'action': event.action,
            'added': [a.address for a in change.added],
            'removed': [a.address for a in change.removed],
            'changed': [a.address for a in change.changed],
        })
        applied.set()

    def step(action):
        applied.clear()
        action()
        applied.wait(WAIT)
        return [(a.address, a.product_id, a.driver)
                for a in inv.accelerators()]

    initial = [a.address for a in inv.accelerators()]
    with events.PciEventWatcher(on_event, source=source):
        bridge = testbed.add_device('pci', 'pci0000:3a', None, [], [])
        path = None

        def add():
            nonlocal path
            path = add_pci(testbed, ADDRESS, bridge)
        after_add = step(add)
        after_change = step(lambda: (
            testbed.set_attribute(path, 'numa_node', '1'),
            testbed.uevent(path, 'change')))
        numa = [a.numa_node for a in inv.accelerators()]

        def remove():
            testbed.uevent(path, 'remove')
            testbed.remove_device(path)
        after_remove = step(remove)
    return {'initial': initial, 'after_add': after_add,
            'after_change': after_change, 'numa_after_change': numa,
            'after_remove': after_remove,
            'changes': [c for c in changes if c['action'] != 'add'
                        or c['added']]}


SCENARIOS = {
    'inventory': scenario_inventory,
    'add': scenario_add,
    'change_remove': scenario_change_remove,
    'non_pci': scenario_non_pci,
    'callback_raises': scenario_callback_raises,
    'lifecycle': scenario_lifecycle,
    'latency': scenario_latency,
}


def main(argv):
    name = argv[1]
    source = argv[2] if len(argv) > 2 else 'udev'
    testbed = umockdev_worker.testbed()
    from cyborg_drivers import events
    result = SCENARIOS[name](testbed, events, source)
    print(json.dumps(result))


if __name__ == '__main__':
    main(sys.argv)
