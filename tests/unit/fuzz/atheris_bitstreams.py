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
    from cyborg_nova import bitstreams

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
