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

"""atheris (libFuzzer) target: the bitstream header parser or manifest.

Run by ``test_atheris.py``; by hand::

    python tests/unit/fuzz/atheris_bitstreams.py parse -runs=100000 DIR

The first argument picks the target (``parse`` or ``manifest``); the rest
are libFuzzer's. An input that makes the target raise anything but its
documented error, or answer with a malformed header, is a crash: the
process exits non-zero and libFuzzer writes the input to ``crash-*``.
"""

import os
import re
import sys
import tempfile

import atheris

with atheris.instrument_imports():
    from cyborg_drivers import bitstreams

HEX32 = re.compile(r'[0-9a-f]{32}')
LIBRARY = tempfile.mkdtemp(prefix='atheris-lib-')


def parse(data: bytes) -> None:
    try:
        found = bitstreams.parse(data)
    except bitstreams.InvalidBitstream:
        return
    assert found.kind in (bitstreams.GBS, bitstreams.XCLBIN), found
    assert HEX32.fullmatch(found.interface_id), found
    assert HEX32.fullmatch(found.function_id), found


def manifest(data: bytes) -> None:
    with open(bitstreams.manifest_path(LIBRARY), 'wb') as f:
        f.write(data)
    try:
        entries = bitstreams.library(LIBRARY)
    except bitstreams.InvalidManifest:
        return
    for name, entry in entries.items():
        assert re.fullmatch(bitstreams.ENTRY_PATTERN, name), name
        bitstreams.check_name(entry.file)


def main() -> None:
    target = {'parse': parse, 'manifest': manifest}[sys.argv.pop(1)]
    try:
        atheris.Setup(sys.argv, target)
        atheris.Fuzz()
    finally:
        path = bitstreams.manifest_path(LIBRARY)
        if os.path.exists(path):
            os.unlink(path)
        os.rmdir(LIBRARY)


if __name__ == '__main__':
    main()
