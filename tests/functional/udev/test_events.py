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

"""PciEventWatcher against real libudev and pyudev, under umockdev.

umockdev needs LD_PRELOAD from process start, so every test runs one
scenario of udev_worker.py in a subprocess under ``umockdev-wrapper`` and
checks the JSON it prints. Needs the Debian packages umockdev and
gir1.2-umockdev-1.0 and PyGObject in this interpreter's environment (see
tools/install-udev-test-deps.sh); without them the tests are skipped,
with the reason.
"""

import json
import os
import shutil
import subprocess
import sys
import unittest

from tests.functional import umockdev_worker

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, 'udev_worker.py')
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
# The worker is a script for another process; what it exits with when a
# dependency is missing comes from the module it shares with the others.
SKIP_STATUS = umockdev_worker.SKIP_STATUS
TIMEOUT = 120

ADDRESS = '0000:3b:00.0'
OTHER_ADDRESS = '0000:3b:00.1'
INSTALL_HINT = ('run tools/install-udev-test-deps.sh %s' % sys.executable)


def _skip(reason):
    reason = 'udev tests: %s; %s' % (reason, INSTALL_HINT)
    # Also on stderr: pytest shows skip reasons only with -rs.
    print(reason, file=sys.stderr)
    raise unittest.SkipTest(reason)


class UdevScenarioTestCase(unittest.TestCase):
    source = 'udev'

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.wrapper = shutil.which('umockdev-wrapper')
        if cls.wrapper is None:
            _skip('umockdev-wrapper not found (Debian package umockdev)')

    def run_scenario(self, name):
        env = dict(os.environ)
        env['PYTHONPATH'] = os.pathsep.join(
            p for p in (REPO_ROOT, env.get('PYTHONPATH')) if p)
        proc = subprocess.run(
            [self.wrapper, sys.executable, WORKER, name, self.source],
            cwd=REPO_ROOT, env=env, capture_output=True, text=True,
            timeout=TIMEOUT)
        lines = proc.stdout.strip().splitlines()
        if proc.returncode == SKIP_STATUS:
            _skip(json.loads(lines[-1])['skip'])
        if proc.returncode != 0 or not lines:
            self.fail('udev worker %r failed with status %s\nstdout:\n%s\n'
                      'stderr:\n%s' % (name, proc.returncode, proc.stdout,
                                       proc.stderr))
        return json.loads(lines[-1])

    @staticmethod
    def summary(events):
        return [(e['action'], e['address']) for e in events]


class TestPciEventWatcher(UdevScenarioTestCase):

    def test_add(self):
        result = self.run_scenario('add')
        self.assertEqual([('add', ADDRESS)], self.summary(result['events']))
        event = result['events'][0]
        self.assertEqual('8086', event['vendor_id'])
        self.assertEqual('4940', event['product_id'])
        self.assertIsInstance(event['seqnum'], int)
        print('\n[%s] add: emit-to-callback %.3f ms'
              % (self.source, result['latency_ms']))

    def test_change_and_remove(self):
        result = self.run_scenario('change_remove')
        self.assertEqual(
            [('add', ADDRESS), ('change', ADDRESS), ('remove', ADDRESS)],
            self.summary(result['events']))
        seqnums = [e['seqnum'] for e in result['events']]
        self.assertEqual(sorted(seqnums), seqnums)
        # The remove event still carries the IDs: they come with the
        # uevent, not from (by then deleted) sysfs attributes.
        remove = result['events'][-1]
        self.assertEqual(('8086', '4940'),
                         (remove['vendor_id'], remove['product_id']))
        print('\n[%s] change: %.3f ms, remove: %.3f ms (emit-to-callback)'
              % (self.source, result['latency_ms']['change'],
                 result['latency_ms']['remove']))

    def test_non_pci_events_are_not_delivered(self):
        result = self.run_scenario('non_pci')
        # Only the PCI function added last; not the usb or net devices
        # before it, nor its host bridge.
        self.assertEqual([('add', ADDRESS)], self.summary(result['events']))

    def test_raising_callback_does_not_stop_watching(self):
        result = self.run_scenario('callback_raises')
        self.assertEqual(
            [('add', ADDRESS), ('add', OTHER_ADDRESS), ('change', ADDRESS)],
            self.summary(result['events']))
        self.assertTrue(result['running'])
        self.assertEqual(3, len(result['logged_errors']))

    def test_start_stop_idempotent(self):
        result = self.run_scenario('lifecycle')
        self.assertEqual(1, result['threads_after_two_starts'])
        self.assertFalse(result['running_after_stop'])
        self.assertTrue(result['sentinel_got_event'])
        self.assertEqual([], result['stopped_events'])

    def test_latency(self):
        result = self.run_scenario('latency')
        self.assertEqual(result['change_rounds'], result['change_received'])
        change = result['change_ms']
        # Printed, not asserted: timing depends on the machine.
        print('\n[%s] emit-to-callback latency: add %.3f ms; change x%d: '
              'min %.3f, median %.3f, p95 %.3f, max %.3f ms'
              % (self.source, result['add_ms'], result['change_rounds'],
                 change['min'], change['median'], change['p95'],
                 change['max']))

    def test_events_rediscover_the_device(self):
        # The whole path: a uevent from (umockdev's) kernel, through real
        # libudev and the watcher, re-discovers just that device.
        result = self.run_scenario('inventory')
        self.assertEqual([], result['initial'])
        self.assertEqual([[ADDRESS, '4940', 'intel_qat']],
                         result['after_add'])
        self.assertEqual([1], result['numa_after_change'])
        self.assertEqual([], result['after_remove'])
        self.assertEqual([
            {'action': 'add', 'added': [ADDRESS], 'removed': [],
             'changed': []},
            {'action': 'change', 'added': [], 'removed': [],
             'changed': [ADDRESS]},
            {'action': 'remove', 'added': [], 'removed': [ADDRESS],
             'changed': []},
        ], result['changes'])


class TestPciEventWatcherKernelSource(TestPciEventWatcher):
    """The same, on raw kernel uevents (before udev rules)."""

    source = 'kernel'
