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

"""Fuzzing the bitstream header parsers and the library (hypothesis).

The inputs: real GBS and xclbin2 headers (as OPAE's packager and XRT lay
them out) with bytes flipped, inserted, cut and length fields changed;
random bytes after a real magic; random files; random manifests of the
bitstream library (including deeply nested and non-UTF-8 ones); random
bitstream names. The parsers may answer only with a header whose ids
are 32 lowercase hex digits, or with their own documented error.

``test_atheris.py`` runs the same parsers under a coverage-guided fuzzer.
"""

import json
import os
import random
import re
import struct
import uuid

from hypothesis import given
from hypothesis import strategies as st
import pytest

from cyborg_drivers import bitstreams
from tests import fuzzing

HEX32 = re.compile(r'[0-9a-f]{32}')
NAME = re.compile(r'[A-Za-z0-9_][A-Za-z0-9._+-]{0,254}'
                  r'(/[A-Za-z0-9_][A-Za-z0-9._+-]{0,254}){0,15}')
COUNTS = {}


def count(target, result):
    counts = COUNTS.setdefault(target, {})
    counts[result] = counts.get(result, 0) + 1


def seeds():
    """Real headers of both kinds."""
    ids = [str(uuid.UUID(int=i * 0x1234567890abcdef + 7))
           for i in range(1, 5)]
    return [bitstreams.make_gbs(ids[0], ids[1], b'\xa5' * 64),
            bitstreams.make_gbs(ids[2], ids[3]),
            bitstreams.make_xclbin(ids[0], ids[2], b'\0' * 64),
            bitstreams.make_xclbin(ids[1], ids[3])]


SEEDS = seeds()


def mutate(data, rnd):
    """``data`` with a few random edits, some to its length fields."""
    data = bytearray(data)
    for _ in range(rnd.randint(1, 6)):
        where = rnd.randint(0, len(data))
        how = rnd.choice(['flip', 'flip', 'insert', 'delete', 'cut',
                          'length', 'json'])
        if how == 'flip' and where < len(data):
            data[where] = rnd.getrandbits(8)
        elif how == 'insert':
            data[where:where] = bytes(rnd.getrandbits(8)
                                      for _ in range(rnd.randint(1, 8)))
        elif how == 'delete':
            del data[where:where + rnd.randint(1, 8)]
        elif how == 'cut':
            del data[where:]
        elif how == 'length':
            # The GBS metadata length, the xclbin m_length or its count
            # of sections.
            offset, fmt = rnd.choice([(16, '<I'), (304, '<Q'),
                                      (304 + 144, '<I')])
            value = rnd.choice([0, 1, 2 ** 32 - 1, 2 ** 31, len(data),
                                len(data) + 1, rnd.getrandbits(32)])
            if offset + struct.calcsize(fmt) <= len(data):
                struct.pack_into(fmt, data, offset,
                                 value % 2 ** (8 * struct.calcsize(fmt)))
        elif how == 'json' and data.startswith(bitstreams.GBS_MAGIC) \
                and len(data) >= bitstreams.GBS_PREFIX:
            text = rnd.choice([b'{}', b'[]', b'null', b'"x"', b'1e999',
                               b'[' * 5000, b'{"afu-image": []}',
                               b'{"afu-image": {"interface-uuid": 5}}',
                               b'\xff\xfe'])
            data[20:] = text
            struct.pack_into('<I', data, 16, len(text))
    return bytes(data)


def check_parse(data, size=None):
    try:
        found = bitstreams.parse(data, size)
    except bitstreams.InvalidBitstream as exc:
        assert str(exc)
        return 'invalid'
    assert found.kind in (bitstreams.GBS, bitstreams.XCLBIN)
    assert HEX32.fullmatch(found.interface_id), found
    assert HEX32.fullmatch(found.function_id), found
    assert found.size == (len(data) if size is None else size)
    return found.kind


@fuzzing.settings(1500)
@given(seed=st.integers(0, 2 ** 64), pick=st.integers(0, len(SEEDS) - 1),
       size=st.one_of(st.none(), st.integers(-10, 2 ** 40)))
def test_mutated_headers(seed, pick, size):
    rnd = random.Random(seed)
    data = mutate(SEEDS[pick], rnd)
    count('parse (mutated real headers)', check_parse(data, size))


@fuzzing.settings(500)
@given(st.sampled_from([bitstreams.GBS_MAGIC, bitstreams.XCLBIN_MAGIC,
                        b'xclbin0\0', b'xclbin1\0', b'']),
       st.binary(max_size=2048))
def test_random_bytes(magic, body):
    count('parse (random bytes)', check_parse(magic + body))


@fuzzing.settings(200)
@given(seed=st.integers(0, 2 ** 64), pick=st.integers(0, len(SEEDS) - 1))
def test_read_from_files(tmp_path_factory, seed, pick):
    directory = str(tmp_path_factory.mktemp('lib'))
    data = mutate(SEEDS[pick], random.Random(seed))
    with open(os.path.join(directory, 'x.bin'), 'wb') as f:
        f.write(data)
    try:
        found = bitstreams.load(directory, 'x.bin')[1]
    except bitstreams.InvalidBitstream:
        count('read (mutated files)', 'invalid')
        return
    assert found.name == 'x.bin' and found.size == len(data)
    count('read (mutated files)', found.kind)


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
              st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=10), inner,
                                            max_size=4)),
    max_leaves=12)
entry_names = st.one_of(st.sampled_from(['nlb3', 'dma-v2', 'a.b_c']),
                        st.text(max_size=70))
file_names = st.one_of(st.sampled_from(['intel/nlb3.gbs', 'u250.xclbin',
                                        '../x', '/etc/passwd', 'a//b',
                                        '.hidden', 'x\n', '']),
                       st.text(max_size=30), json_values)
manifests = st.one_of(
    st.builds(lambda entries: json.dumps({'bitstreams': entries}).encode(),
              st.dictionaries(entry_names, st.one_of(
                  st.fixed_dictionaries(
                      {'file': file_names},
                      optional={'description': json_values}),
                  json_values), max_size=4)),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.integers(1, 200000).map(lambda n: b'[' * n + b']' * n),
    st.integers(1, 200000).map(lambda n: b'{"bitstreams": ' + b'[' * n),
    st.binary(max_size=200),
)


@fuzzing.settings(400)
@given(raw=manifests)
def test_library_manifests(tmp_path_factory, raw):
    directory = str(tmp_path_factory.mktemp('lib'))
    with open(bitstreams.manifest_path(directory), 'wb') as f:
        f.write(raw)
    try:
        found = bitstreams.library(directory)
    except bitstreams.InvalidManifest as exc:
        assert str(exc)
        count('library (manifests)', 'invalid')
        return
    for name, entry in found.items():
        assert re.fullmatch(bitstreams.ENTRY_PATTERN, name)
        assert NAME.fullmatch(entry.file), entry
        assert isinstance(entry.description, str)
    count('library (manifests)', 'read')


@pytest.fixture(scope='module')
def library(tmp_path_factory):
    top = tmp_path_factory.mktemp('names')
    directory = top / 'lib'
    (directory / 'intel').mkdir(parents=True)
    (directory / 'intel' / 'nlb3.gbs').write_bytes(SEEDS[0])
    (top / 'outside.gbs').write_bytes(SEEDS[0])
    os.symlink(str(top / 'outside.gbs'), str(directory / 'escape.gbs'))
    os.symlink('..', str(directory / 'up'))
    return str(directory)


@fuzzing.settings(500)
@given(name=st.one_of(
    st.text(alphabet='abc./_-+\n\0 \\~*', max_size=30),
    st.sampled_from(['intel/nlb3.gbs', 'escape.gbs', 'up/outside.gbs',
                     'up/lib/intel/nlb3.gbs', 'intel/../intel/nlb3.gbs']),
    st.text(max_size=30), st.integers(), st.none(), st.binary()))
def test_names_never_leave_the_directory(library, name):
    try:
        path = bitstreams.resolve(library, name)
    except bitstreams.BadName:
        count('resolve (names)', 'refused')
        return
    except bitstreams.NotFound:
        assert NAME.fullmatch(name), name
        count('resolve (names)', 'not found')
        return
    assert NAME.fullmatch(name), name
    assert path.startswith(os.path.realpath(library) + os.sep)
    count('resolve (names)', 'resolved')


def test_report_bitstream_counts():
    """Prints what the fuzzers above tried (runs after them)."""
    if not COUNTS:
        pytest.skip('the bitstream fuzzers did not run in this session')
    for target, counts in sorted(COUNTS.items()):
        fuzzing.report('bitstreams %s' % target, sum(counts.values()),
                       **counts)
