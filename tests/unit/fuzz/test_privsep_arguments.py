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

"""Fuzzing the privileged entrypoints' argument checks (hypothesis).

Every entrypoint's work is done by an undecorated inner function, the one
the daemon runs; here each is called with arguments hypothesis makes from
valid ones (the tree's real addresses, mdev types, uuids, bitstream
names) by adding, replacing and removing characters, and with values of
the wrong type. What may happen:

- the call is refused with ``privsep.InvalidArgument`` (or a subclass),
  and then nothing in the sysfs tree, the drop-in's directory or
  libvirt was touched and no tool was run;
- the call goes through (or the host is ``NotPossible``), and then every
  argument was valid by the documented rule (checked here with
  independent patterns: full lowercase PCI address, canonical uuid, ...).

Any other exception is a crash of the check.
"""

import os
import re
import uuid

from hypothesis import given
from hypothesis import strategies as st
import pytest

from cyborg_drivers import bitstreams
from cyborg_drivers.fake import hosttree
import privsep
from privsep import fpga
from privsep import libvirt as privsep_libvirt
from privsep import mdev
from privsep import nova_conf
from privsep import nvme
from privsep import pci
from privsep import qat
from tests import fuzzing
from tests import nvmehost
from tests.unit.privsep import fakesysfs
from tests.unit.programming import fakes

ADDRESS = re.compile(r'[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]')
UUID = re.compile(r'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-'
                  r'[0-9a-f]{12}')
TYPE_ID = re.compile(r'[A-Za-z0-9_-]+')
BITSTREAM = re.compile(r'[A-Za-z0-9_][A-Za-z0-9._+-]*'
                       r'(/[A-Za-z0-9_][A-Za-z0-9._+-]*)*')
PLACEMENT_NAME = re.compile(r'[A-Z0-9_]{1,255}')
QAT_SERVICE = r'(asym|sym|dc|decomp|dcc)'
QAT_SERVICES = re.compile(r'%s(;%s){0,2}' % (QAT_SERVICE, QAT_SERVICE))

#: Characters that make an argument name something else.
TRICKY = ['\n', '\r', '\0', '/', '..', '../', ' ', '\t', '*', '?', '%s',
          ':', '.', '-', 'A', 'é', '\u0660', '\ufeff', '\u202e', '\\']
WRONG_TYPES = st.one_of(st.none(), st.booleans(), st.integers(),
                        st.floats(allow_nan=True), st.binary(max_size=16),
                        st.lists(st.text(max_size=4), max_size=2),
                        st.dictionaries(st.text(max_size=4),
                                        st.text(max_size=4), max_size=2))


def near(valid):
    """Strings made from the valid ``valid`` (a list), and others."""
    base = st.sampled_from(valid)
    piece = st.one_of(st.sampled_from(TRICKY), st.sampled_from(TRICKY),
                      st.text(max_size=3))

    @st.composite
    def edited(draw):
        value = draw(base)
        for _ in range(draw(st.integers(1, 3))):
            where = draw(st.integers(0, len(value)))
            how = draw(st.sampled_from(['append', 'prepend', 'insert',
                                        'replace', 'cut', 'upper']))
            if how == 'append':
                value += draw(piece)
            elif how == 'prepend':
                value = draw(piece) + value
            elif how == 'insert':
                value = value[:where] + draw(piece) + value[where:]
            elif how == 'replace':
                value = value[:where] + draw(piece) + value[where + 1:]
            elif how == 'cut':
                value = value[:where]
            else:
                value = value.upper()
        return value
    # Valid values often enough that all-valid calls happen too.
    return st.one_of(base, base, base, edited(), edited(), edited(),
                     st.text(max_size=40), WRONG_TYPES)


def valid(pattern, value):
    return isinstance(value, str) and bool(pattern.fullmatch(value))


COUNTS = {}


def outcome(target, call, *checks, untouched=lambda: True,
            refusal=lambda exc: True):
    """Run ``call`` and check what it did.

    Refused, it changed nothing (no file written or created, no process
    started), ``untouched()`` holds and ``refusal(exc)`` (the right
    error for what was wrong); otherwise all ``checks`` hold.
    """
    counts = COUNTS.setdefault(target, {'refused': 0, 'accepted': 0})
    with fuzzing.Changes() as changes:
        try:
            call()
        except privsep.InvalidArgument as exc:
            assert not changes.events, changes.events
            assert untouched()
            assert refusal(exc), repr(exc)
            counts['refused'] += 1
            return 'refused'
        except privsep.NotPossible:
            pass
    for check in checks:
        assert check()
    counts['accepted'] += 1
    return 'accepted'


@pytest.fixture(scope='module')
def gpu_tree(tmp_path_factory):
    root = str(tmp_path_factory.mktemp('gpu') / 'sys')
    fakesysfs.build(root)
    devices = os.path.join(root, 'bus', 'pci', 'devices')
    addresses = sorted(os.listdir(devices))
    parents = [a for a in addresses if os.path.isdir(
        os.path.join(devices, a, 'mdev_supported_types'))]
    types = sorted({t for a in parents for t in os.listdir(
        os.path.join(devices, a, 'mdev_supported_types'))})
    mdev_uuid = str(uuid.uuid4())
    fakesysfs.add_mdev(root, parents[0], mdev_uuid)
    return {'root': root, 'addresses': addresses, 'types': types or ['x'],
            'parents': parents, 'uuids': [mdev_uuid, str(uuid.uuid4())]}


def checked_first(value):
    """An invalid address is refused as such, never looked up first."""
    return lambda exc: valid(ADDRESS, value) or not isinstance(
        exc, privsep.NoSuchDevice)


def exists(root, address):
    return lambda: os.path.isdir(fakesysfs.device(root, address))


@fuzzing.settings(150)
@given(address=st.data())
def test_pci_entrypoints(gpu_tree, address):
    root = gpu_tree['root']
    value = address.draw(near(gpu_tree['addresses']), label='address')
    count = address.draw(st.one_of(st.integers(-3, 20),
                                   st.integers(), WRONG_TYPES), label='count')
    for name, call in (
            ('pci.bind_vfio', lambda: pci._bind_vfio(root, value)),
            ('pci.unbind', lambda: pci._unbind(root, value)),
            ('pci.set_num_vfs',
             lambda: pci._set_num_vfs(root, value, count))):
        checks = [lambda: valid(ADDRESS, value), exists(root, value)]
        if name == 'pci.set_num_vfs':
            checks.append(lambda: type(count) is int and count >= 0)
        outcome(name, call, *checks, refusal=checked_first(value))


@pytest.fixture(scope='module')
def nvme_tree(tmp_path_factory):
    root = str(tmp_path_factory.mktemp('nvme') / 'sys')
    hosttree.build_tree(nvmehost.PROFILE, root)
    return {'root': root, 'addresses': sorted(os.listdir(
        os.path.join(root, 'bus', 'pci', 'devices')))}


@fuzzing.settings(150)
@given(data=st.data())
def test_nvme_format_namespaces(nvme_tree, data):
    root = nvme_tree['root']
    value = data.draw(near(nvme_tree['addresses']), label='address')
    controllers = nvmehost.Controllers()
    # Accepted only for a VF of the drive, the one kind of function whose
    # namespaces may go; refused, no admin command was sent.
    outcome('nvme.format_namespaces',
            lambda: nvme._format_namespaces(root, value, opener=controllers,
                                            wait=0),
            lambda: valid(ADDRESS, value), exists(root, value),
            lambda: value in nvmehost.VFS,
            untouched=lambda: controllers.commands == [],
            refusal=checked_first(value))


@fuzzing.settings(150)
@given(data=st.data())
def test_mdev_entrypoints(gpu_tree, data):
    root = gpu_tree['root']
    parent = data.draw(near(gpu_tree['parents']), label='parent')
    type_id = data.draw(near(gpu_tree['types']), label='type_id')
    mdev_uuid = data.draw(near(gpu_tree['uuids']), label='mdev_uuid')
    checks = [lambda: valid(ADDRESS, parent), exists(root, parent),
              lambda: valid(UUID, mdev_uuid)]
    outcome('mdev.create',
            lambda: mdev._create(root, parent, type_id, mdev_uuid),
            lambda: valid(TYPE_ID, type_id), *checks,
            refusal=checked_first(parent))
    outcome('mdev.remove', lambda: mdev._remove(root, parent, mdev_uuid),
            *checks, refusal=checked_first(parent))


@fuzzing.settings(150)
@given(data=st.data())
def test_nova_conf_write_device_spec(gpu_tree, tmp_path_factory, data):
    root = gpu_tree['root']
    directory = str(tmp_path_factory.mktemp('nova.conf.d'))
    spec_file = os.path.join(directory, '60-cyborg-nova-pci.conf')
    value = st.one_of(near(gpu_tree['addresses']),
                      near(['CUSTOM_A', 'physnet0', '10de', '1eb8']),
                      st.lists(near(['CUSTOM_X', 'HW_GPU_API_CUDA']),
                               max_size=3), st.booleans())
    key = st.one_of(st.sampled_from(nova_conf.KEYS), st.text(max_size=8))
    entries = data.draw(st.one_of(
        st.lists(st.dictionaries(key, value, max_size=5), max_size=4),
        WRONG_TYPES), label='entries')

    def nothing_written():
        return os.listdir(directory) == []

    def entries_valid():
        for entry in entries:
            assert valid(ADDRESS, entry['address'])
            assert set(entry) <= set(nova_conf.KEYS)
            for key in ('resource_class',):
                if key in entry:
                    assert valid(PLACEMENT_NAME, entry[key])
            for trait in entry.get('traits', []):
                assert valid(PLACEMENT_NAME, trait)
        return True
    outcome('nova_conf.write_device_spec',
            lambda: nova_conf._write_device_spec(root, spec_file, entries),
            lambda: isinstance(entries, (list, tuple)), entries_valid,
            untouched=nothing_written)


@pytest.fixture(scope='module')
def qat_tree(tmp_path_factory):
    root = str(tmp_path_factory.mktemp('qat') / 'sys')
    fakesysfs.build(root, 'qat-gen4-host')
    return {'root': root, 'addresses': sorted(os.listdir(
        os.path.join(root, 'bus', 'pci', 'devices')))}


@fuzzing.settings(150)
@given(data=st.data())
def test_qat_set_services(qat_tree, data):
    root = qat_tree['root']
    address = data.draw(near(qat_tree['addresses'] + ['0000:f7:00.0'] * 8),
                        label='address')
    services = data.draw(near(['sym;asym', 'dc', 'decomp', 'asym;sym;dc',
                               'dcc']), label='services')
    outcome('qat.set_services',
            lambda: qat._set_services(root, address, services),
            lambda: valid(ADDRESS, address), exists(root, address),
            lambda: valid(QAT_SERVICES, services),
            refusal=checked_first(address))


@pytest.fixture(scope='module')
def fpga_host(tmp_path_factory):
    top = tmp_path_factory.mktemp('fpga')
    root = str(top / 'sys')
    hosttree.build_tree('fpga-host', root)
    lib = fakes.library(str(top / 'bitstreams'))
    names = []
    for directory, _dirs, files in os.walk(lib):
        names += [os.path.relpath(os.path.join(directory, f), lib)
                  for f in files]
    return {'root': root, 'lib': lib, 'names': sorted(names),
            'addresses': sorted(os.listdir(os.path.join(
                root, 'bus', 'pci', 'devices')))}


@fuzzing.settings(150)
@given(data=st.data())
def test_fpga_program(fpga_host, data):
    root, lib = fpga_host['root'], fpga_host['lib']
    address = data.draw(near(fpga_host['addresses']), label='address')
    name = data.draw(near(fpga_host['names']), label='bitstream')
    runs = []

    def run(argv, **kwargs):
        # Only reached with everything checked.
        runs.append(argv)
        raise privsep.NotPossible('not running %s in a fuzz test' % argv)

    def refusal(exc):
        if not valid(ADDRESS, address):
            return not isinstance(exc, privsep.NoSuchDevice)
        if not os.path.isdir(fakesysfs.device(root, address)):
            return isinstance(exc, privsep.NoSuchDevice)
        # A malformed name is refused as such, never looked up.
        return valid(BITSTREAM, name) or isinstance(
            exc, privsep.PathLikeArgument)

    def inside_library():
        path = os.path.realpath(os.path.join(lib, name))
        return path.startswith(os.path.realpath(lib) + os.sep)
    outcome('fpga.program',
            lambda: fpga._program(root, address, name, bitstream_dir=lib,
                                  timeout=5, run=run),
            lambda: valid(ADDRESS, address), exists(root, address),
            lambda: valid(BITSTREAM, name), inside_library,
            untouched=lambda: not runs, refusal=refusal)


class NoLibvirt:
    """A libvirt connection that must not be used with a bad argument."""

    def __init__(self):
        self.used = []

    def __getattr__(self, name):
        self.used.append(name)
        raise privsep.NotPossible('no libvirt in a fuzz test')


@fuzzing.settings(150)
@given(data=st.data())
def test_libvirt_entrypoints(data):
    server = data.draw(near([str(uuid.uuid4())]), label='server_uuid')
    address = data.draw(near(['0000:3b:00.0', '0000:af:00.1']),
                        label='address')
    for name, inner in (('libvirt.attach_hostdev',
                         privsep_libvirt._attach_hostdev),
                        ('libvirt.detach_hostdev',
                         privsep_libvirt._detach_hostdev),
                        ('libvirt.hostdev_attached',
                         privsep_libvirt._hostdev_attached)):
        conn = NoLibvirt()
        outcome(name, lambda: inner(conn, server, address),
                lambda: valid(UUID, server), lambda: valid(ADDRESS, address),
                untouched=lambda: not conn.used)
    conn = NoLibvirt()
    outcome('libvirt.check_domain',
            lambda: privsep_libvirt._check_domain(conn, server),
            lambda: valid(UUID, server), untouched=lambda: not conn.used)


def test_valid_arguments_go_through(gpu_tree, fpga_host, qat_tree, tmp_path,
                                    monkeypatch):
    """The checks above can fail: valid calls are not refused."""
    root = gpu_tree['root']
    devices = os.path.join(root, 'bus', 'pci', 'devices')
    pf = [a for a in gpu_tree['addresses'] if os.path.exists(
        os.path.join(devices, a, 'sriov_totalvfs'))][0]
    parent = gpu_tree['parents'][0]
    type_id = sorted(os.listdir(os.path.join(devices, parent,
                                             'mdev_supported_types')))[0]
    with open(os.path.join(devices, pf, 'sriov_totalvfs')) as f:
        total = int(f.read())
    server = str(uuid.uuid4())
    tools = fakes.install_tools(str(tmp_path / 'bin'))
    monkeypatch.setenv('PATH', tools + os.pathsep + os.environ['PATH'])

    def run(argv, **kwargs):
        raise privsep.NotPossible('not running %s here' % argv[0])
    calls = [
        # All of a GPU's VFs, through (a stand-in of) NVIDIA's script.
        lambda: pci._set_num_vfs(root, pf, total,
                                 sriov_manage=fakesysfs.sriov_manage(
                                     tmp_path, root)),
        lambda: pci._unbind(root, pf),
        lambda: mdev._create(root, parent, type_id, str(uuid.uuid4())),
        lambda: mdev._remove(root, parent, gpu_tree['uuids'][0]),
        lambda: nova_conf._write_device_spec(
            root, str(tmp_path / 'spec.conf'), [{'address': pf}]),
        lambda: fpga._program(fpga_host['root'], fakes.PAC0,
                              'intel/nlb3.gbs',
                              bitstream_dir=fpga_host['lib'], timeout=5,
                              run=run),
        lambda: privsep_libvirt._check_domain(NoLibvirt(), server),
        lambda: privsep_libvirt._attach_hostdev(NoLibvirt(), server, pf),
        # The 6xxx of qat-gen4-host that is down.
        lambda: qat._set_services(qat_tree['root'], '0000:f7:00.0',
                                  'sym;dc'),
    ]
    for n, call in enumerate(calls):
        assert outcome('valid call', call) == 'accepted', n


def test_trailing_newlines_are_refused(gpu_tree, fpga_host):
    """What the fuzzer found: ``$`` matched before a final newline."""
    root = gpu_tree['root']
    address = gpu_tree['addresses'][-1]
    with pytest.raises(privsep.NotAPciAddress):
        pci._bind_vfio(root, address + '\n')
    with pytest.raises(bitstreams.BadName):
        bitstreams.check_name(fpga_host['names'][0] + '\n')


def test_report_privsep_counts():
    """Prints what the fuzzers above tried (runs after them)."""
    if not COUNTS:
        pytest.skip('the privsep fuzzers did not run in this session')
    for target, counts in sorted(COUNTS.items()):
        fuzzing.report('privsep %s' % target, sum(counts.values()),
                       **counts)
