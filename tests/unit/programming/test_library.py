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

"""The bitstream library: manifest entries, and names commands take."""

import json
import os

import pytest

from cyborg_drivers import bitstreams
from cyborg_nova import programming
from tests.unit.programming import fakes


def write(directory, body):
    with open(os.path.join(directory, bitstreams.MANIFEST), 'w') as f:
        f.write(body if isinstance(body, str) else json.dumps(body))


def test_entries_and_file_of(tmp_path):
    write(tmp_path, {'bitstreams': {
        'dma': {'file': 'intel/dma.gbs', 'description': 'DMA'},
        'nlb3': {'file': 'intel/nlb3.gbs'}}})
    found = bitstreams.library(str(tmp_path))
    assert found == {
        'dma': bitstreams.Entry('dma', 'intel/dma.gbs', 'DMA'),
        'nlb3': bitstreams.Entry('nlb3', 'intel/nlb3.gbs', '')}
    assert bitstreams.file_of(str(tmp_path), 'dma') == 'intel/dma.gbs'
    # Names that are not entries are file names, as they are.
    assert bitstreams.file_of(str(tmp_path), 'u250.xclbin') == 'u250.xclbin'
    assert bitstreams.file_of(str(tmp_path), '../x') == '../x'


def test_no_manifest_is_an_empty_library(tmp_path):
    assert bitstreams.library(str(tmp_path)) == {}
    assert bitstreams.file_of(str(tmp_path), 'dma') == 'dma'


@pytest.mark.parametrize('body, message', [
    ('{"bitstreams": ', 'is not JSON'),
    ('[]', 'has no "bitstreams" object'),
    ({'bitstreams': []}, 'has no "bitstreams" object'),
    ({'bitstreams': {'-x': {'file': 'a.gbs'}}}, "entry name '-x'"),
    ({'bitstreams': {'a' * 65: {'file': 'a.gbs'}}}, 'at most 64'),
    ({'bitstreams': {'dma': 'dma.gbs'}}, 'entry dma has no "file"'),
    ({'bitstreams': {'dma': {'file': 3}}}, 'entry dma has no "file"'),
    ({'bitstreams': {'dma': {'file': '/etc/passwd'}}},
     'entry dma: bitstream \'/etc/passwd\' is an absolute path'),
    ({'bitstreams': {'dma': {'file': 'a/../../x.gbs'}}},
     'goes up with ".."'),
    ({'bitstreams': {'dma': {'file': 'a.gbs', 'description': 1}}},
     '"description" must be a string'),
])
def test_malformed_manifests_say_what_is_wrong(tmp_path, body, message):
    write(tmp_path, body)
    with pytest.raises(bitstreams.InvalidManifest) as exc:
        bitstreams.library(str(tmp_path))
    assert message in str(exc.value)
    assert bitstreams.MANIFEST in str(exc.value)


def test_oversized_manifest(tmp_path):
    write(tmp_path, ' ' * (bitstreams.MANIFEST_MAX + 1))
    with pytest.raises(bitstreams.InvalidManifest, match='larger than'):
        bitstreams.library(str(tmp_path))


def test_programmer_takes_entries_and_refuses_a_broken_library(tmp_path):
    library = tmp_path / 'bitstreams'
    library.mkdir()
    fakes.library(str(library))
    conf = fakes.config(str(tmp_path / 'x.conf'), {'cyborg_nova': {
        'bitstream_dir': str(library),
        'state_path': str(tmp_path / 'state.sqlite')}})
    from cyborg_nova import store as state_store
    programmer = programming.Programmer(
        conf, state_store.StateStore(conf.cyborg_nova.state_path), None,
        [], str(tmp_path))
    try:
        write(str(library), {'bitstreams': {'nlb3': {
            'file': 'intel/nlb3.gbs'}}})
        assert programmer.library_file('nlb3') == 'intel/nlb3.gbs'
        assert programmer.library_file('intel/dma.gbs') == 'intel/dma.gbs'
        write(str(library), '{')
        with pytest.raises(programming.Refused) as exc:
            programmer.library_file('nlb3')
        assert exc.value.code == 409
        assert 'the bitstream library is broken' in str(exc.value)
    finally:
        programmer.close()
