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

"""GBS and xclbin2 headers, bitstream names, and the parsers under fuzz."""

import os
import struct
import uuid

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import pytest

from cyborg_drivers import bitstreams

PAC_INTERFACE = '9346116d-a52d-5ca8-b06a-a9a389ef7c8d'
NLB3 = 'f7df405c-bd7a-cf72-22f1-44b0b93acd18'
U250_SHELL = 'aae4ec49-c710-567b-99f9-ffb11858d4a8'
XCLBIN_UUID = '3f2a8e7c-1b4d-4c6e-9a0f-5d7e8c9b0a1f'


def hexid(value):
    return uuid.UUID(value).hex


def test_gbs_header_is_read():
    data = bitstreams.make_gbs(PAC_INTERFACE, NLB3, b'\xff' * 4096)
    # The GUID magic reads as OPAE's "XeonFPGA·GBSv001".
    assert data[:16] == b'XeonFPGA\xb7GBSv001'
    found = bitstreams.parse(data)
    assert found == bitstreams.Bitstream(
        bitstreams.GBS, hexid(PAC_INTERFACE), hexid(NLB3), len(data))


def test_gbs_metadata_padded_with_nuls_as_the_packager_does():
    data = bitstreams.make_gbs(PAC_INTERFACE, NLB3)
    (length,) = struct.unpack_from('<I', data, 16)
    padded = (data[:16] + struct.pack('<I', length + 8) + data[20:]
              + b'\0' * 8)
    assert bitstreams.parse(padded).function_id == hexid(NLB3)


def test_xclbin_header_is_read_at_the_axlf_offsets():
    data = bitstreams.make_xclbin(U250_SHELL, XCLBIN_UUID, b'\0' * 100)
    assert data[:8] == b'xclbin2\0'
    # axlf_header.m_interface_uuid and .uuid, per XRT's xclbin.h.
    assert data[336:352] == uuid.UUID(U250_SHELL).bytes
    assert data[416:432] == uuid.UUID(XCLBIN_UUID).bytes
    found = bitstreams.parse(data)
    assert (found.kind, found.interface_id, found.function_id) == (
        bitstreams.XCLBIN, hexid(U250_SHELL), hexid(XCLBIN_UUID))


def _gbs(metadata: bytes) -> bytes:
    return bitstreams.GBS_MAGIC + struct.pack('<I', len(metadata)) + metadata


def _xclbin(**fields) -> bytes:
    data = bytearray(bitstreams.make_xclbin(U250_SHELL, XCLBIN_UUID))
    offsets = {'length': (304, '<Q'), 'sections': (448, '<I')}
    for name, value in fields.items():
        if name in offsets:
            offset, fmt = offsets[name]
            struct.pack_into(fmt, data, offset, value)
        elif name == 'interface':
            data[336:352] = value
        elif name == 'uuid':
            data[416:432] = value
    return bytes(data)


@pytest.mark.parametrize('data, words', [
    (b'', 'empty'),
    (b'\x7fELF' + b'\0' * 60, 'unknown magic 7f454c46'),
    (bitstreams.GBS_MAGIC + b'\x01', 'GBS header truncated'),
    (bitstreams.GBS_MAGIC + struct.pack('<I', 0), 'without metadata'),
    (bitstreams.GBS_MAGIC + struct.pack('<I', 1 << 30), 'larger than'),
    (bitstreams.GBS_MAGIC + struct.pack('<I', 500) + b'{}', 'truncated'),
    (_gbs(b'{"afu-image": '), 'not JSON'),
    (_gbs(b'\xff\xfe'), 'not JSON'),
    (_gbs(b'[1, 2]'), 'not a JSON object'),
    (_gbs(b'{}'), 'has no afu-image'),
    (_gbs(b'{"afu-image": []}'), 'afu-image is not a JSON object'),
    (_gbs(b'{"afu-image": {"interface-uuid": 7}}'), 'interface-uuid'),
    (_gbs(b'{"afu-image": {"interface-uuid": "nope"}}'), 'not a uuid'),
    (_gbs(('{"afu-image": {"interface-uuid": "%s"}}'
           % PAC_INTERFACE).encode()), 'accelerator-clusters'),
    (_gbs(('{"afu-image": {"interface-uuid": "%s", '
           '"accelerator-clusters": []}}' % PAC_INTERFACE).encode()),
     'no accelerator-clusters'),
    (_gbs(('{"afu-image": {"interface-uuid": "%s", '
           '"accelerator-clusters": [3]}}' % PAC_INTERFACE).encode()),
     'is not an object'),
    (_gbs(('{"afu-image": {"interface-uuid": "%s", '
           '"accelerator-clusters": [{}]}}' % PAC_INTERFACE).encode()),
     'accelerator-type-uuid'),
    (_gbs(b'[' * 100000 + b']' * 100000), 'not JSON'),
    (b'xclbin2\0' + b'\0' * 100, 'xclbin2 header truncated'),
    (b'xclbin0\0' + b'\0' * 600, 'old format'),
    (_xclbin(length=10), 'smaller than its own header'),
    (_xclbin(length=1 << 40), 'm_length says'),
    (_xclbin(sections=1 << 20), 'claims'),
    (_xclbin(sections=3), 'do not fit'),
    (_xclbin(interface=b'\0' * 16), 'no m_interface_uuid'),
    (_xclbin(uuid=b'\0' * 16), 'no uuid'),
])
def test_broken_headers_are_clear_errors(data, words):
    with pytest.raises(bitstreams.InvalidBitstream) as caught:
        bitstreams.parse(data)
    assert words in str(caught.value)


def test_a_header_longer_than_the_file_is_truncation():
    data = bitstreams.make_gbs(PAC_INTERFACE, NLB3)
    with pytest.raises(bitstreams.InvalidBitstream, match='truncated'):
        bitstreams.parse(data[:-5])
    with pytest.raises(bitstreams.InvalidBitstream, match='m_length'):
        xclbin = bitstreams.make_xclbin(U250_SHELL, XCLBIN_UUID, b'1' * 64)
        bitstreams.parse(xclbin, size=len(xclbin) - 1)


# -- fuzzing ------------------------------------------------------------------

def _only_invalid(data, size=None):
    try:
        found = bitstreams.parse(data, size)
    except bitstreams.InvalidBitstream as exc:
        assert str(exc)
        return None
    assert found.kind in (bitstreams.GBS, bitstreams.XCLBIN)
    assert len(found.interface_id) == len(found.function_id) == 32
    return found


@settings(max_examples=600, deadline=None)
@given(st.binary(max_size=2048))
def test_random_bytes_raise_nothing_but_invalid_bitstream(data):
    _only_invalid(data)


@settings(max_examples=600, deadline=None)
@given(st.sampled_from([bitstreams.GBS_MAGIC, bitstreams.XCLBIN_MAGIC]),
       st.binary(max_size=1024), st.integers(0, 1 << 40))
def test_random_bodies_after_a_real_magic(magic, body, size):
    _only_invalid(magic + body, size)


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(['gbs', 'xclbin']),
       st.lists(st.tuples(st.integers(0, 600), st.integers(0, 255)),
                max_size=12),
       st.integers(0, 700))
def test_mutated_real_headers(kind, flips, cut):
    if kind == 'gbs':
        data = bytearray(bitstreams.make_gbs(PAC_INTERFACE, NLB3))
    else:
        data = bytearray(bitstreams.make_xclbin(U250_SHELL, XCLBIN_UUID))
    for offset, value in flips:
        if offset < len(data):
            data[offset] = value
    _only_invalid(bytes(data[:len(data) - cut if cut < len(data) else 0]))


@settings(max_examples=300, deadline=None)
@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=40),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(['afu-image', 'interface-uuid',
                         'accelerator-clusters', 'accelerator-type-uuid',
                         'x']), children, max_size=4), max_leaves=20))
def test_any_json_metadata(metadata):
    import json
    _only_invalid(_gbs(json.dumps(metadata).encode()))


# -- names and files ----------------------------------------------------------

@pytest.fixture
def library(tmp_path):
    lib = tmp_path / 'bitstreams'
    (lib / 'intel').mkdir(parents=True)
    (lib / 'intel' / 'nlb3.gbs').write_bytes(
        bitstreams.make_gbs(PAC_INTERFACE, NLB3))
    (lib / 'alias.gbs').symlink_to(lib / 'intel' / 'nlb3.gbs')
    (tmp_path / 'secret.gbs').write_bytes(
        bitstreams.make_gbs(PAC_INTERFACE, NLB3))
    (lib / 'escape.gbs').symlink_to(tmp_path / 'secret.gbs')
    (lib / 'up').symlink_to(tmp_path)
    (lib / 'garbage.gbs').write_bytes(b'not a bitstream')
    return str(lib)


def test_names_resolve_under_the_directory(library):
    path, found = bitstreams.load(library, 'intel/nlb3.gbs')
    assert path == os.path.join(os.path.realpath(library), 'intel',
                                'nlb3.gbs')
    assert found.function_id == hexid(NLB3)
    assert found.name == 'intel/nlb3.gbs'
    # A symlink that stays inside is fine.
    assert bitstreams.load(library, 'alias.gbs')[0] == path


@pytest.mark.parametrize('name, error, words', [
    ('/etc/passwd', bitstreams.BadName, 'absolute path'),
    ('../secret.gbs', bitstreams.BadName, '".."'),
    ('intel/../../secret.gbs', bitstreams.BadName, '".."'),
    ('./intel/nlb3.gbs', bitstreams.BadName, 'not a plain file name'),
    ('intel//nlb3.gbs', bitstreams.BadName, 'not a plain file name'),
    ('.hidden', bitstreams.BadName, 'not a plain file name'),
    ('nlb3.gbs\0', bitstreams.BadName, 'not a plain file name'),
    ('', bitstreams.BadName, 'not a plain file name'),
    (7, bitstreams.BadName, 'must be a string'),
    ('escape.gbs', bitstreams.Outside, 'outside the bitstream directory'),
    ('up/secret.gbs', bitstreams.Outside, 'outside the bitstream'),
    ('missing.gbs', bitstreams.NotFound, 'no bitstream'),
    ('intel', bitstreams.NotFound, 'not a regular file'),
    ('garbage.gbs', bitstreams.InvalidBitstream, 'unknown magic'),
])
def test_bad_names_are_refused(library, name, error, words):
    with pytest.raises(error, match=words):
        bitstreams.load(library, name)


def test_the_name_pattern_matches_check_name():
    import re
    pattern = re.compile(bitstreams.NAME_PATTERN)
    for name in ('a.gbs', 'vendor/x-1_2+3.xclbin', 'A/B/C'):
        assert pattern.match(name) and bitstreams.check_name(name)
    for name in ('/a', '../a', 'a/../b', '.a', 'a/', 'a b'):
        assert not pattern.match(name)
        with pytest.raises(bitstreams.BadName):
            bitstreams.check_name(name)
