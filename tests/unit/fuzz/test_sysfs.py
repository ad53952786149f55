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

"""Fuzzing discovery with broken sysfs trees and generated hosts.

Each example copies a realistic tree (one of the shipped host profiles),
breaks a few of its entries the way hypothesis chooses (garbage or empty
contents, huge and negative numbers, undecodable bytes, deleted files,
broken, looping and misdirected symlinks, a directory where a file was,
a file where a directory or link was) and runs a whole discovery cycle
with every driver that reads sysfs, then a partial one (what a udev event
triggers).

No crash means: discovery returns (or raises only ``NoSysfs``, when the
PCI bus itself is gone), no driver fails with an internal error, no
health check raises, nothing is logged with a traceback, and every
accelerator reported is one Placement would accept: a valid resource
class and trait names, a sane inventory, a JSON-serialisable record.

A second fuzzer generates whole hosts (intact trees) with hypothesis:
the shipped profiles' cards in new slots, in any number and mix, bound
to their drivers, to vfio-pci, pci-stub or nothing, with any number of
VFs enabled; discovery must report each function once at most.
"""

import copy
import json
import logging
import os
import random
import re
import shutil
import signal
import sys

import hypothesis
from hypothesis import given
from hypothesis import strategies as st
from oslo_config import cfg
import pytest
import yaml

from cyborg_drivers import discovery
from cyborg_drivers.fake import hosttree
from cyborg_drivers.fake import profile as fake_profile
from cyborg_drivers import loader
from cyborg_drivers import sysfs
from cyborg_nova import providers
from cyborg_nova import store as state_store
from tests import fuzzing

#: Placement's own limits on names (its JSON schemas).
PLACEMENT_NAME = re.compile(r'^[A-Z0-9_]{1,255}$')
STANDARD_RC = {'PGPU', 'VGPU', 'FPGA', 'PCI_DEVICE', 'SRIOV_NET_VF'}

# Every driver that reads the tree under test. ``fake`` is left out: it
# reads a profile and builds a tree of its own.
DRIVERS = ['intel_fpga', 'intel_qat', 'nvidia_gpu', 'xilinx_fpga',
           'nic_sriov', 'generic']
DRIVER_CONF = {
    'cyborg_nic_sriov': {
        'physical_device_mappings': ['physnet1:ens1f0', 'physnet2:ens2f0',
                                     'physnet3:enp94s0f0'],
        'function_device_mappings': ['ipsec:ens1f0']},
    'cyborg_generic': {
        'device_spec': ['{"class": "1200", "resource_class": '
                        '"CUSTOM_PROCESSING"}',
                        '{"vendor_id": "1af4", "units": "device"}']},
}

INTERESTING = [
    b'', b'\n', b' ', b'0x', b'0x\n', b'-1\n', b'-0\n', b'+5\n', b'1e9\n',
    b'nan\n', b'0xffffffffffffffffffffffffffffffff\n',
    b'99999999999999999999999999\n', b'4294967296\n', b'65536\n',
    b'\x00', b'\x00\x00\x00\x00', b'\xff\xfe\xfd', b'\xc3\x28\n',
    b'0x10de\n', b'0x8086\n', b'0x120000\n', b'0x030200\n',
    b'PCI_ID=10DE:ZZZZ\n', b'PCI_ID=\n', b'PCI_CLASS=-1\n',
    b'PCI_SLOT_NAME=../../..\n', b'DRIVER=\n', b'DRIVER=../x\n',
    b'DRIVER=nvidia\nPCI_CLASS=30200\nPCI_ID=10DE:1EB8\n'
    b'PCI_SUBSYS_ID=10DE:12A2\nPCI_SLOT_NAME=0000:ff:1f.7\n',
    b'0000:3b:00.0\n', b'0000:zz:00.0\n', b'../../../etc/passwd\n',
    b'a' * 5000, b'0-3,5,7-\n', b'4-2\n', b'ffffffff,ffffffff\n',
    b'd8424dc4a4a3c413f89e433683f9040b\n', b'not-a-uuid\n',
    b'CUSTOM_\n', b'lower_case name\n', 'ünïcödé\n'.encode(),
]

UEVENT_KEYS = ['DRIVER', 'PCI_CLASS', 'PCI_ID', 'PCI_SUBSYS_ID',
               'PCI_SLOT_NAME', 'MODALIAS', 'MAJOR']
ALPHABET = b'0123456789abcdefxX:.-+ \n=,/_ABCDEFZ\x00\xff'


def near(original, rnd):
    """``original`` with a few bytes flipped, inserted or deleted."""
    data = bytearray(original)
    for _ in range(rnd.randint(1, 4)):
        where = rnd.randint(0, len(data))
        what = rnd.choice(['flip', 'insert', 'delete', 'cut'])
        if what == 'flip' and data and where < len(data):
            data[where] = rnd.choice(ALPHABET)
        elif what == 'insert':
            data[where:where] = bytes([rnd.choice(ALPHABET)])
        elif what == 'delete' and where < len(data):
            del data[where]
        elif what == 'cut':
            del data[where:]
    return bytes(data)


def garbage(original, rnd):
    """A bad value for an attribute whose good value was ``original``."""
    try:
        number = int(original.strip() or b'x', 0)
    except ValueError:
        number = None
    kind = rnd.choice(['interesting', 'near', 'near', 'near', 'int',
                       'bytes', 'text', 'uevent']
                      + ['extreme'] * (4 if number is not None else 0))
    if kind == 'extreme':
        # A number where one was: out of its range, huge, negative.
        return b'%d\n' % rnd.choice([
            -1, -number, number + 1, number * 1000, 2 ** 15, 2 ** 16,
            2 ** 31, 2 ** 32, 2 ** 63, 10 ** 20, 10 ** 100])
    if kind == 'interesting':
        return rnd.choice(INTERESTING)
    if kind == 'near':
        return near(original, rnd)
    if kind == 'int':
        number = rnd.choice([rnd.randint(-2 ** 70, 2 ** 70),
                             rnd.randint(-300, 300)])
        return (rnd.choice(['%d\n', '0x%x\n', '%x\n']) % number).encode()
    if kind == 'bytes':
        return bytes(rnd.getrandbits(8)
                     for _ in range(rnd.randint(0, 64)))
    if kind == 'text':
        return bytes(rnd.choice(ALPHABET)
                     for _ in range(rnd.randint(0, 40)))
    return b''.join(
        b'%s=%s\n' % (rnd.choice(UEVENT_KEYS).encode(),
                      near(original[:20], rnd))
        for _ in range(rnd.randint(0, 6)))


MUTATIONS = ['garbage'] * 8 + [
    'empty', 'delete', 'broken_link', 'self_link', 'parent_link',
    'root_link', 'other_link', 'dir']


ADDRESS = re.compile(r'(^|/)[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]/')


# Paths opened or listed while a recording is on (an audit hook cannot be
# removed, so it only records when asked).
_RECORDING = []


def _audit(event, args):
    if _RECORDING and event in ('open', 'os.listdir', 'os.scandir') \
            and args and isinstance(args[0], str):
        _RECORDING[-1].add(args[0])


sys.addaudithook(_audit)


def _read_by_discovery(root, drivers):
    """The entries a clean discovery of ``root`` reads (relative)."""
    _RECORDING.append(set())
    try:
        discovery.Discoverer(drivers, root).discover()
    finally:
        seen = _RECORDING.pop()
    found = set()
    real_root = os.path.realpath(root)
    for path in seen:
        # Through bus/pci/devices/<address>: the entry is where it leads.
        for where in (path, os.path.realpath(path)):
            rel = os.path.relpath(where, real_root if where != path
                                  else root)
            if not rel.startswith('..'):
                found.add(rel)
    return found


@pytest.fixture(scope='module')
def pristine(tmp_path_factory, drivers):
    """Each shipped profile's tree, built once, with its entries.

    The entries are the tree's files, directories and links (relative
    paths), in three lists the fuzzer draws from: those a clean discovery
    reads (opened, listed) or follows (the links of a PCI function),
    those inside a PCI function's directory, and all of them.
    """
    top = tmp_path_factory.mktemp('pristine')
    trees = {}
    for name in hosttree.PROFILE_NAMES:
        root = str(top / name / 'sys')
        hosttree.build_tree(hosttree.profile_path(name), root)
        entries = []
        for directory, dirs, files in os.walk(root):
            for entry in sorted(dirs + files):
                entries.append(os.path.relpath(
                    os.path.join(directory, entry), root))
        entries.sort()
        inside = [e for e in entries if ADDRESS.search(e)]
        read = _read_by_discovery(root, drivers)
        hot = sorted({e for e in inside
                      if e in read or os.path.islink(os.path.join(root, e))}
                     | {e for e in read if e in entries})
        trees[name] = (root, hot, inside, entries)
    return trees


@pytest.fixture(scope='module')
def drivers():
    conf = cfg.ConfigOpts()
    conf([])
    classes = [loader.installed()[name] for name in DRIVERS]
    loader.register_opts(conf, classes)
    for group, options in DRIVER_CONF.items():
        for option, value in options.items():
            conf.set_override(option, value, group)
    return loader.load(conf, DRIVERS)


class Crashes(logging.Handler):
    """Every record logged with a traceback."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        if record.exc_info:
            self.records.append(self.format(record))


def _remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)


class Breaker:
    """Breaks entries of a tree in place, and puts them back.

    The original entry is renamed aside (cheap, whatever its size) and
    renamed back by :meth:`restore`, in reverse order, so the module's
    pristine trees are reused by every example.
    """

    def __init__(self, root, attic):
        self.root = root
        self.attic = attic
        self.moved = []

    def mutate(self, relpath, kind, rnd, other):
        """Break one entry; False if it is already gone."""
        path = os.path.join(self.root, relpath)
        if not os.path.lexists(path):
            return False
        original = b''
        if os.path.isfile(path) and not os.path.islink(path):
            with open(path, 'rb') as f:
                original = f.read(4096)
        aside = os.path.join(self.attic, str(len(self.moved)))
        os.rename(path, aside)
        self.moved.append((path, aside))
        if kind == 'garbage' or kind == 'empty':
            with open(path, 'wb') as f:
                f.write(garbage(original, rnd) if kind == 'garbage'
                        else b'')
        elif kind == 'broken_link':
            os.symlink('../no/such/device', path)
        elif kind == 'self_link':
            os.symlink(os.path.basename(path), path)
        elif kind == 'parent_link':
            os.symlink('..', path)
        elif kind == 'root_link':
            os.symlink(os.path.relpath(self.root, os.path.dirname(path)),
                       path)
        elif kind == 'other_link':
            os.symlink(os.path.relpath(os.path.join(self.root, other),
                                       os.path.dirname(path)), path)
        elif kind == 'dir':
            os.mkdir(path)
        return True

    def restore(self):
        for path, aside in reversed(self.moved):
            if os.path.lexists(path):
                _remove(path)
            os.rename(aside, path)
        self.moved = []


def check_accelerator(acc):
    """What Placement and the APIs need of a reported accelerator."""
    assert PLACEMENT_NAME.match(acc.resource_class), acc.resource_class
    assert acc.resource_class in STANDARD_RC or \
        acc.resource_class.startswith('CUSTOM_'), acc.resource_class
    for trait in acc.traits:
        assert PLACEMENT_NAME.match(trait), trait
    assert isinstance(acc.total, int) and 0 <= acc.total < 2 ** 31, acc
    for current in state_store.STATES:
        inventory = providers.inventory(acc, current)
        for record in inventory.values():
            assert 0 <= record['reserved'] <= record['total']
    json.dumps(acc.to_dict())
    json.dumps(acc.to_hardware('cn1'))


#: Seconds two discovery cycles over a broken tree may take at most.
CYCLE_LIMIT = 60


def _too_slow(signum, frame):
    raise AssertionError('discovery did not finish within %d s'
                         % CYCLE_LIMIT)


# hypothesis runs examples sequentially inside one test call, so these
# counters add up over the whole run.
TRIED = {'examples': 0, 'mutations': 0, 'no_bus': 0, 'reported': 0,
         'left_out': 0}


@fuzzing.settings(300)
@given(data=st.data())
def test_discovery_survives_broken_trees(pristine, drivers, tmp_path,
                                         data):
    profile = data.draw(st.sampled_from(sorted(pristine)), label='profile')
    root, hot, inside, everything = pristine[profile]
    devices = os.path.join(root, 'bus', 'pci', 'devices')
    before = sorted(os.listdir(devices))
    TRIED['examples'] += 1
    attic = str(tmp_path / ('attic%d' % TRIED['examples']))
    os.mkdir(attic)
    breaker = Breaker(root, attic)
    # hypothesis picks the seed; the breakage is random from there, which
    # covers far more values than hypothesis' own (shrinking) choices.
    rnd = random.Random(data.draw(st.integers(0, 2 ** 64), label='seed'))
    lists = [hot] * 4 + [inside, everything]
    try:
        for _ in range(rnd.randint(1, 8)):
            relpath = rnd.choice(rnd.choice(lists))
            kind = rnd.choice(MUTATIONS)
            TRIED['mutations'] += breaker.mutate(
                relpath, kind, rnd, rnd.choice(everything))

        crashes = Crashes()
        logging.getLogger().addHandler(crashes)
        # A cycle that does not end is a crash too (nova-compute's
        # periodic task would hang): SIGALRM fails the example.
        signal.signal(signal.SIGALRM, _too_slow)
        signal.alarm(CYCLE_LIMIT)
        try:
            try:
                result = discovery.Discoverer(drivers, root).discover()
            except sysfs.NoSysfs:
                TRIED['no_bus'] += 1
                assert not os.path.isdir(devices)
                return
            # A udev event re-reads one function and its card.
            names = sorted(os.listdir(devices))
            only = rnd.sample(names, min(len(names), rnd.randint(1, 3)))
            partial = discovery.Discoverer(drivers, root).discover(only=only)
        finally:
            signal.alarm(0)
            logging.getLogger().removeHandler(crashes)
        assert not crashes.records, crashes.records
        for outcome in (result, partial):
            internal = {d: e for d, e in outcome.driver_errors.items()
                        if e.startswith('internal error')}
            assert not internal, internal
            for acc in outcome.accelerators:
                assert not any(p.startswith('health cannot be read')
                               for p in acc.problems), acc.problems
                check_accelerator(acc)
        TRIED['reported'] += len(result.accelerators)
        TRIED['left_out'] += len(result.problems)
    finally:
        breaker.restore()
        os.rmdir(attic)
    # Put back whole, for the next example.
    assert sorted(os.listdir(devices)) == before


def test_report_sysfs_counts():
    """Prints what the fuzzer above tried (runs after it)."""
    if not TRIED['examples']:
        pytest.skip('the sysfs fuzzer did not run in this session')
    fuzzing.report('sysfs discovery', TRIED['examples'],
                   entries_broken=TRIED['mutations'],
                   accelerators_reported=TRIED['reported'],
                   functions_left_out=TRIED['left_out'],
                   bus_gone=TRIED['no_bus'])
    assert TRIED['examples'] >= min(fuzzing.examples(300), 200)


# -- trees of generated hosts ------------------------------------------------

def cards():
    """Every card of the shipped profiles: its functions, by slot."""
    found = {}
    for name in hosttree.PROFILE_NAMES:
        with open(hosttree.profile_path(name)) as f:
            profile = yaml.safe_load(f)
        for device in profile['devices']:
            if device['class'] >> 16 == 0x06:
                continue  # bridges: where a card sits, not a card
            slot = device['address'].rpartition('.')[0]
            found.setdefault((name, slot), []).append(device)
    return [found[key] for key in sorted(found)]


CARDS = cards()


@st.composite
def hosts(draw):
    """A host profile: shipped cards in new slots, settings changed."""
    chosen = draw(st.lists(st.sampled_from(range(len(CARDS))),
                           min_size=1, max_size=8))
    devices = []
    for n, index in enumerate(chosen):
        bus = 0x10 + n * 4
        for function in CARDS[index]:
            device = copy.deepcopy(function)
            device.pop('parent', None)
            device.pop('iommu_group', None)
            device['address'] = '0000:%02x:00.%s' % (
                bus, function['address'].rpartition('.')[2])
            if draw(st.booleans()):
                driver = draw(st.sampled_from(
                    [None, 'vfio-pci', 'pci-stub', device.get('driver')]))
                if driver != device.get('driver'):
                    # What a driver shows in sysfs goes with it: an FPGA's
                    # regions, a QAT's qat/ (profiles refuse them else).
                    device.pop('fpga', None)
                    device.pop('qat', None)
                device['driver'] = driver
                if device['driver'] is None:
                    del device['driver']
            if chosen[:n].count(index):
                # The same card again: its existing mdevs cannot have
                # the same uuids twice on one host.
                for attrs in (device.get('mdev_types') or {}).values():
                    attrs.pop('devices', None)
            device['numa_node'] = draw(st.integers(-1, 3))
            sriov = device.get('sriov')
            if sriov:
                sriov['numvfs'] = draw(st.integers(
                    0, min(sriov['totalvfs'], 32)))
                if draw(st.booleans()):
                    sriov.pop('vf_driver', None)
            devices.append(device)
    return {'name': 'generated', 'devices': devices}


GENERATED = {'hosts': 0, 'refused': 0, 'reported': 0}


@fuzzing.settings(40, suppress_health_check=list(hypothesis.HealthCheck))
@given(profile=hosts())
def test_discovery_of_generated_hosts(drivers, tmp_path_factory, profile):
    root = str(tmp_path_factory.mktemp('generated') / 'sys')
    try:
        hosttree.build_tree(profile, root)
    except fake_profile.ProfileError:
        # Two cards' VFs in the same place: not a host that can exist.
        GENERATED['refused'] += 1
        hypothesis.reject()
    GENERATED['hosts'] += 1
    try:
        crashes = Crashes()
        logging.getLogger().addHandler(crashes)
        try:
            result = discovery.Discoverer(drivers, root).discover()
        finally:
            logging.getLogger().removeHandler(crashes)
        assert not crashes.records, crashes.records
        assert not {d: e for d, e in result.driver_errors.items()
                    if e.startswith('internal error')}
        for acc in result.accelerators:
            check_accelerator(acc)
        # Nothing is reported twice, and every address is on the bus.
        seen = [a for acc in result.accelerators for a in acc.addresses]
        assert len(seen) == len(set(seen))
        on_bus = set(os.listdir(os.path.join(root, 'bus', 'pci',
                                             'devices')))
        assert set(seen) <= on_bus
        GENERATED['reported'] += len(result.accelerators)
    finally:
        shutil.rmtree(os.path.dirname(root), ignore_errors=True)


def test_report_generated_counts():
    """Prints what the generated-host fuzzer tried (runs after it)."""
    if not GENERATED['hosts']:
        pytest.skip('the generated-host fuzzer did not run in this session')
    fuzzing.report('sysfs discovery of generated hosts', GENERATED['hosts'],
                   accelerators_reported=GENERATED['reported'],
                   impossible_hosts_skipped=GENERATED['refused'])
