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

"""Unit tests for cyborg_drivers.events, without libudev.

event_from_device gets plain stand-ins for pyudev devices; the watcher
gets a stand-in pyudev module, so these run wherever the package imports.
"""

import dataclasses
import logging
import os
import subprocess
import sys
import types
import unittest

from cyborg_drivers import events


class FakeDevice:
    """Looks like a pyudev.Device received from a monitor."""

    def __init__(self, sys_name, properties=None, sequence_number=0,
                 subsystem='pci', action='add'):
        self.sys_name = sys_name
        self.sys_path = '/sys/devices/pci0000:3a/%s' % sys_name
        self.properties = dict(properties or {})
        self.sequence_number = sequence_number
        self.subsystem = subsystem
        self.action = action


class MappingDevice:
    """Only sys_name and a get(): the older pyudev mapping interface."""

    def __init__(self, sys_name, properties):
        self.sys_name = sys_name
        self._properties = properties

    def get(self, name, default=None):
        return self._properties.get(name, default)


QAT_PROPERTIES = {'PCI_ID': '8086:4940', 'PCI_SLOT_NAME': '0000:3b:00.0',
                  'PCI_CLASS': 'B4000', 'SEQNUM': '17'}


class TestEventFromDevice(unittest.TestCase):

    def test_pci_function(self):
        device = FakeDevice('0000:3b:00.0', QAT_PROPERTIES,
                            sequence_number=17)
        self.assertEqual(
            events.PciEvent('add', '0000:3b:00.0', '8086', '4940', 17),
            events.event_from_device('add', device))

    def test_action_is_passed_through(self):
        device = FakeDevice('0000:3b:00.0', QAT_PROPERTIES)
        for action in ('remove', 'change', 'bind', 'unbind'):
            self.assertEqual(
                action, events.event_from_device(action, device).action)

    def test_pci_id_is_lowercased(self):
        device = FakeDevice('0000:af:00.1', {'PCI_ID': '10EE:5A2C'})
        event = events.event_from_device('add', device)
        self.assertEqual(('10ee', '5a2c'),
                         (event.vendor_id, event.product_id))

    def test_no_pci_id(self):
        event = events.event_from_device('remove',
                                         FakeDevice('0000:3b:00.0'))
        self.assertEqual('0000:3b:00.0', event.address)
        self.assertIsNone(event.vendor_id)
        self.assertIsNone(event.product_id)

    def test_malformed_pci_id(self):
        for pci_id in ('8086', '8086:49400', 'zzzz:4940', '', '8086:'):
            event = events.event_from_device(
                'add', FakeDevice('0000:3b:00.0', {'PCI_ID': pci_id}))
            self.assertEqual((None, None),
                             (event.vendor_id, event.product_id), pci_id)

    def test_mapping_style_device(self):
        device = MappingDevice('0000:3b:00.0', QAT_PROPERTIES)
        self.assertEqual(
            events.PciEvent('change', '0000:3b:00.0', '8086', '4940', 17),
            events.event_from_device('change', device))

    def test_seqnum_zero_falls_back_to_property(self):
        device = FakeDevice('0000:3b:00.0', {'SEQNUM': '42'},
                            sequence_number=0)
        self.assertEqual(42, events.event_from_device('add', device).seqnum)

    def test_seqnum_unknown(self):
        for properties in ({}, {'SEQNUM': 'x'}, {'SEQNUM': '0'}):
            device = FakeDevice('0000:3b:00.0', properties)
            self.assertIsNone(
                events.event_from_device('add', device).seqnum)

    def test_wide_domain(self):
        # Functions behind Intel VMD have 5-digit domains.
        event = events.event_from_device('add',
                                         FakeDevice('10000:01:00.0'))
        self.assertEqual('10000:01:00.0', event.address)

    def test_not_a_pci_function(self):
        for sys_name in ('pci0000:00', 'pci0000:3a', '0000:3b:00',
                         '0000:3b:00.8', '3b:00.0', 'card0', '', None):
            self.assertIsNone(
                events.event_from_device('add', FakeDevice(sys_name)),
                sys_name)

    def test_other_subsystem(self):
        device = FakeDevice('0000:3b:00.0', QAT_PROPERTIES,
                            subsystem='usb')
        self.assertIsNone(events.event_from_device('add', device))

    def test_no_action(self):
        device = FakeDevice('0000:3b:00.0', QAT_PROPERTIES)
        self.assertIsNone(events.event_from_device('', device))
        self.assertIsNone(events.event_from_device(None, device))

    def test_event_is_frozen(self):
        event = events.PciEvent('add', '0000:3b:00.0', '8086', '4940', 1)
        self.assertRaises(dataclasses.FrozenInstanceError,
                          setattr, event, 'action', 'remove')


class FakePyudev:
    """Just enough of pyudev for PciEventWatcher, recording the calls."""

    def __init__(self):
        self.calls = []
        self.observers = []
        fake = self

        class Context:
            pass

        class Monitor:
            def __init__(self, context, source):
                self.context = context
                self.source = source
                self.started = False

            @classmethod
            def from_netlink(cls, context, source='udev'):
                fake.calls.append(('from_netlink', source))
                return cls(context, source)

            def filter_by(self, subsystem):
                fake.calls.append(('filter_by', subsystem))

            def start(self):
                fake.calls.append(('monitor.start',))
                self.started = True

        class MonitorObserver:
            def __init__(self, monitor, callback, name=None):
                self.monitor = monitor
                self.callback = callback
                self.alive = False
                fake.observers.append(self)

            def start(self):
                fake.calls.append(('observer.start',
                                   self.monitor.started))
                self.alive = True

            def stop(self):
                fake.calls.append(('observer.stop',))
                self.alive = False

            def is_alive(self):
                return self.alive

        self.module = types.ModuleType('pyudev')
        self.module.Context = Context
        self.module.Monitor = Monitor
        self.module.MonitorObserver = MonitorObserver


class TestPciEventWatcher(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.pyudev = FakePyudev()
        saved = sys.modules.get('pyudev')
        sys.modules['pyudev'] = self.pyudev.module
        self.addCleanup(self._restore_pyudev, saved)
        self.received = []

    @staticmethod
    def _restore_pyudev(saved):
        if saved is None:
            sys.modules.pop('pyudev', None)
        else:
            sys.modules['pyudev'] = saved

    def test_start_order_and_idempotence(self):
        watcher = events.PciEventWatcher(self.received.append,
                                         source='kernel')
        watcher.start()
        watcher.start()
        self.assertTrue(watcher.running)
        self.assertEqual(
            [('from_netlink', 'kernel'), ('filter_by', 'pci'),
             ('monitor.start',),
             # The monitor was started before the observer thread.
             ('observer.start', True)],
            self.pyudev.calls)
        watcher.stop()
        watcher.stop()
        self.assertFalse(watcher.running)
        self.assertEqual(1, self.pyudev.calls.count(('observer.stop',)))

    def test_restart_after_stop(self):
        watcher = events.PciEventWatcher(self.received.append)
        watcher.start()
        watcher.stop()
        watcher.start()
        self.assertTrue(watcher.running)
        self.assertEqual(2, len(self.pyudev.observers))

    def test_context_manager(self):
        with events.PciEventWatcher(self.received.append) as watcher:
            self.assertTrue(watcher.running)
        self.assertFalse(watcher.running)

    def test_given_context_is_used(self):
        context = object()
        with events.PciEventWatcher(self.received.append,
                                    context=context):
            self.assertIs(context,
                          self.pyudev.observers[0].monitor.context)

    def test_events_reach_the_callback(self):
        with events.PciEventWatcher(self.received.append):
            deliver = self.pyudev.observers[0].callback
            deliver(FakeDevice('0000:3b:00.0', QAT_PROPERTIES,
                               sequence_number=17, action='bind'))
            deliver(FakeDevice('pci0000:3a', action='add'))
        self.assertEqual(
            [events.PciEvent('bind', '0000:3b:00.0', '8086', '4940', 17)],
            self.received)

    def test_callback_exception_is_logged_not_raised(self):
        def callback(event):
            self.received.append(event)
            raise ValueError('boom')

        with events.PciEventWatcher(callback):
            deliver = self.pyudev.observers[0].callback
            with self.assertLogs(events.LOG, logging.ERROR) as logs:
                deliver(FakeDevice('0000:3b:00.0'))
                deliver(FakeDevice('0000:3b:00.1'))
        self.assertEqual(['0000:3b:00.0', '0000:3b:00.1'],
                         [e.address for e in self.received])
        self.assertEqual(2, len(logs.records))
        self.assertIsNotNone(logs.records[0].exc_info)

    def test_nothing_opened_before_start(self):
        events.PciEventWatcher(self.received.append)
        self.assertEqual([], self.pyudev.calls)


class TestImport(unittest.TestCase):

    def test_module_does_not_import_pyudev(self):
        # In a fresh interpreter: this one may have pyudev loaded already.
        code = ('import sys, cyborg_drivers.events; '
                'sys.exit("pyudev" in sys.modules)')
        repo_root = os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))))
        subprocess.run([sys.executable, '-c', code], check=True,
                       cwd=repo_root)
