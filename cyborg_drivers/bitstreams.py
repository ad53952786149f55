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

"""FPGA bitstream files: where they may come from, and what they say.

Two container formats carry what programming must check before anything
is touched:

- Intel's GBS (OPAE "green bitstream"): a 16-byte GUID magic
  (``58656F6E-4650-4741-B747-425376303031``, "XeonFPGA·GBSv001"), a
  little-endian u32 metadata length, then that many bytes of JSON with
  ``afu-image.interface-uuid`` (the FIM's PR interface the AFU was built
  for) and ``afu-image.accelerator-clusters[0].accelerator-type-uuid``
  (the AFU id the port shows once it is loaded). The PR bitstream follows.
- Xilinx's xclbin2 (XRT ``xclbin.h``): ``struct axlf``, the magic
  ``xclbin2\\0`` at offset 0 and an ``axlf_header`` at offset 304 with
  ``m_interface_uuid`` (the shell interface it loads into) and ``uuid``
  (the xclbin's own uuid, what the card reports once it is loaded).

The parsers read only the header and never trust a length field: a
truncated, oversized or garbage file is an :class:`InvalidBitstream` with
a message that says what is wrong, never another exception.

Bitstreams are named, not pathed: :func:`resolve` turns a name (a file
name, or a relative path) into a file under the configured bitstream
directory, refusing absolute paths, ``..`` and symlinks that lead out of
it. The privileged helper resolves the same name again under its own
configured directory.

The directory is also a library: its :data:`MANIFEST` names entries
(``{"bitstreams": {"nlb3": {"file": "intel/nlb3.gbs", "description":
"..."}}}``), which flavors ask for with the ``cyborg_nova:bitstream``
extra spec and commands take wherever a bitstream name is expected.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import stat
import struct
import uuid

GBS = 'gbs'
XCLBIN = 'xclbin'

#: "XeonFPGA·GBSv001" as the GUID OPAE's packager writes at offset 0.
GBS_MAGIC = uuid.UUID('58656F6E-4650-4741-B747-425376303031').bytes
#: GUID magic + u32 metadata length.
GBS_PREFIX = len(GBS_MAGIC) + 4
#: Larger metadata is not a GBS anyone built (OPAE's are < 4 KiB).
GBS_MAX_METADATA = 1024 * 1024

XCLBIN_MAGIC = b'xclbin2\0'
#: sizeof(struct axlf) up to the first section header: magic (8),
#: m_signature_length (4), reserved (28), m_keyBlock (256), m_uniqueId
#: (8), then the 152-byte axlf_header.
XCLBIN_HEADER_OFFSET = 304
XCLBIN_HEADER_SIZE = 152
XCLBIN_FIXED = XCLBIN_HEADER_OFFSET + XCLBIN_HEADER_SIZE
XCLBIN_SECTION_SIZE = 40
XCLBIN_MAX_SECTIONS = 0x10000
# Offsets inside axlf_header.
_XH_LENGTH = 0
_XH_INTERFACE = 32
_XH_UUID = 112
_XH_NUM_SECTIONS = 144

#: Enough of any file to parse its header.
HEADER_READ = max(GBS_PREFIX + GBS_MAX_METADATA, XCLBIN_FIXED)

# One path segment: starts with a letter, digit or underscore (so never
# "." or ".."), then the characters file names of bitstreams use.
_SEGMENT = r'[A-Za-z0-9_][A-Za-z0-9._+-]{0,254}'
#: A bitstream name: segments joined by "/", nothing else.
NAME_PATTERN = r'^%s(/%s){0,15}$' % (_SEGMENT, _SEGMENT)
_NAME_RE = re.compile(NAME_PATTERN)


class InvalidBitstream(ValueError):
    """The file is not a bitstream this project can check, or is broken."""


class BadName(ValueError):
    """A bitstream name that could name a file outside the directory."""


class Outside(BadName):
    """A bitstream name that resolves outside the directory (a symlink)."""


class NotFound(LookupError):
    """No bitstream of that name in the directory."""


class InvalidManifest(ValueError):
    """The library's manifest cannot be read or is malformed."""


@dataclasses.dataclass(frozen=True)
class Bitstream:
    """What a bitstream's header says.

    Ids are normalised as the drivers read them from sysfs: 32 lowercase
    hex digits, no dashes.
    """

    kind: str  # GBS or XCLBIN
    interface_id: str
    function_id: str
    size: int
    name: str = ''

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def normalise_id(value: str) -> str:
    """A uuid as sysfs spells it: 32 lowercase hex digits.

    :raises ValueError: not a uuid.
    """
    return uuid.UUID(value).hex


# -- parsing ---------------------------------------------------------------

def parse(data: bytes, size: int | None = None) -> Bitstream:
    """The header of a bitstream whose first bytes are ``data``.

    :param size: the whole file's size (``len(data)`` if the whole file
        was read); a header claiming more than the file holds is refused.
    :raises InvalidBitstream: not a GBS or xclbin2, or a broken header.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidBitstream('bitstream data must be bytes, not %s'
                               % type(data).__name__)
    data = bytes(data)
    size = len(data) if size is None else size
    if data.startswith(GBS_MAGIC):
        return _parse_gbs(data, size)
    if data.startswith(XCLBIN_MAGIC):
        return _parse_xclbin(data, size)
    if data[:8] in (b'xclbin0\0', b'xclbin1\0'):
        raise InvalidBitstream('an xclbin of an old format (%r); only '
                               'xclbin2 carries an interface uuid'
                               % data[:7].decode('ascii'))
    raise InvalidBitstream('not a GBS or xclbin2 file (unknown magic %s)'
                           % data[:16].hex() if data else
                           'the file is empty')


def _parse_gbs(data: bytes, size: int) -> Bitstream:
    if len(data) < GBS_PREFIX:
        raise InvalidBitstream('GBS header truncated: %d bytes, the magic '
                               'and metadata length need %d'
                               % (len(data), GBS_PREFIX))
    (length,) = struct.unpack_from('<I', data, len(GBS_MAGIC))
    if length == 0:
        raise InvalidBitstream('GBS without metadata (length 0)')
    if length > GBS_MAX_METADATA:
        raise InvalidBitstream('GBS metadata length %d is larger than the '
                               '%d allowed' % (length, GBS_MAX_METADATA))
    if GBS_PREFIX + length > min(size, len(data)):
        raise InvalidBitstream('GBS truncated: the header announces %d '
                               'bytes of metadata, the file has %d'
                               % (length, max(0, min(size, len(data))
                                              - GBS_PREFIX)))
    raw = data[GBS_PREFIX:GBS_PREFIX + length]
    try:
        # OPAE's packager pads the metadata with NULs.
        metadata = json.loads(raw.rstrip(b'\0').decode('utf-8'))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InvalidBitstream('GBS metadata is not JSON: %s'
                               % str(exc)[:200])
    image = _member(metadata, 'afu-image', dict, 'GBS metadata')
    interface = _uuid_member(image, 'interface-uuid', 'GBS afu-image')
    clusters = _member(image, 'accelerator-clusters', list,
                       'GBS afu-image')
    if not clusters:
        raise InvalidBitstream('GBS afu-image has no accelerator-clusters: '
                               'no AFU id to check after loading')
    first = clusters[0]
    if not isinstance(first, dict):
        raise InvalidBitstream('GBS accelerator-clusters[0] is not an '
                               'object')
    afu = _uuid_member(first, 'accelerator-type-uuid',
                       'GBS accelerator-clusters[0]')
    return Bitstream(GBS, interface, afu, size)


def _member(obj, key: str, kind: type, where: str):
    if not isinstance(obj, dict):
        raise InvalidBitstream('%s is not a JSON object' % where)
    if key not in obj:
        raise InvalidBitstream('%s has no %s' % (where, key))
    value = obj[key]
    if not isinstance(value, kind):
        raise InvalidBitstream('%s %s is not a JSON %s' % (
            where, key, 'object' if kind is dict else 'array'))
    return value


def _uuid_member(obj: dict, key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise InvalidBitstream('%s has no %s string' % (where, key))
    try:
        return normalise_id(value)
    except ValueError:
        raise InvalidBitstream('%s %s %r is not a uuid'
                               % (where, key, value[:80]))


def _parse_xclbin(data: bytes, size: int) -> Bitstream:
    if len(data) < XCLBIN_FIXED or size < XCLBIN_FIXED:
        raise InvalidBitstream('xclbin2 header truncated: %d bytes, the '
                               'axlf header needs %d'
                               % (min(len(data), size), XCLBIN_FIXED))
    header = data[XCLBIN_HEADER_OFFSET:XCLBIN_FIXED]
    (length,) = struct.unpack_from('<Q', header, _XH_LENGTH)
    (sections,) = struct.unpack_from('<I', header, _XH_NUM_SECTIONS)
    if length < XCLBIN_FIXED:
        raise InvalidBitstream('xclbin2 m_length %d is smaller than its '
                               'own header' % length)
    if length > size:
        raise InvalidBitstream('xclbin2 truncated: m_length says %d bytes, '
                               'the file has %d' % (length, size))
    if sections > XCLBIN_MAX_SECTIONS:
        raise InvalidBitstream('xclbin2 claims %d sections; at most %d'
                               % (sections, XCLBIN_MAX_SECTIONS))
    if XCLBIN_HEADER_OFFSET + XCLBIN_HEADER_SIZE + (
            sections * XCLBIN_SECTION_SIZE) > length:
        raise InvalidBitstream('xclbin2 section headers (%d) do not fit in '
                               'its m_length of %d bytes'
                               % (sections, length))
    interface = header[_XH_INTERFACE:_XH_INTERFACE + 16]
    xclbin_uuid = header[_XH_UUID:_XH_UUID + 16]
    if not any(interface):
        raise InvalidBitstream('xclbin2 has no m_interface_uuid (all '
                               'zero): it cannot be matched to a shell')
    if not any(xclbin_uuid):
        raise InvalidBitstream('xclbin2 has no uuid (all zero): what is '
                               'loaded could not be verified')
    return Bitstream(XCLBIN, interface.hex(), xclbin_uuid.hex(), size)


# -- files -----------------------------------------------------------------

def check_name(name: object) -> str:
    """``name`` if it can only name a file under a directory.

    :raises BadName: not a string, absolute, with ``..`` or ``.``
        segments, empty segments, a NUL or other odd characters.
    """
    if not isinstance(name, str):
        raise BadName('a bitstream name must be a string, not %s'
                      % type(name).__name__)
    if name.startswith('/'):
        raise BadName('bitstream %r is an absolute path; give its name '
                      'under the bitstream directory' % name[:200])
    if '..' in name.split('/'):
        raise BadName('bitstream %r goes up with ".."; give its name '
                      'under the bitstream directory' % name[:200])
    # fullmatch: with match, "$" also matches before a final newline.
    if not _NAME_RE.fullmatch(name):
        raise BadName('bitstream %r is not a plain file name or relative '
                      'path (letters, digits, "._+-", segments joined by '
                      '"/", none starting with ".")' % name[:200])
    return name


def resolve(directory: str, name: object) -> str:
    """The real path of bitstream ``name`` under ``directory``.

    Symlinks are followed, but the file they lead to must be in the
    directory too.

    :raises BadName: see :func:`check_name`; also a name that resolves
        outside the directory (a symlink out of it).
    :raises NotFound: no such regular file.
    """
    name = check_name(name)
    base = os.path.realpath(directory)
    path = os.path.realpath(os.path.join(base, name))
    if not path.startswith(base + os.sep):
        raise Outside('bitstream %r resolves to %s, outside the bitstream '
                      'directory %s' % (name, path, base))
    try:
        mode = os.stat(path).st_mode
    except OSError:
        raise NotFound('no bitstream %r in %s' % (name, base))
    if not stat.S_ISREG(mode):
        raise NotFound('bitstream %r in %s is not a regular file'
                       % (name, base))
    return path


def read(path: str, name: str = '') -> Bitstream:
    """The header of the bitstream file at ``path`` (already resolved).

    :raises InvalidBitstream: see :func:`parse`; also a file that cannot
        be read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as exc:
        raise InvalidBitstream('cannot open bitstream %s: %s'
                               % (name or path, exc.strerror))
    try:
        size = os.fstat(fd).st_size
        chunks, left = [], HEADER_READ
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise InvalidBitstream('cannot read bitstream %s: %s'
                               % (name or path, exc.strerror))
    finally:
        os.close(fd)
    try:
        found = parse(b''.join(chunks), size)
    except InvalidBitstream as exc:
        raise InvalidBitstream('%s: %s' % (name or path, exc))
    return dataclasses.replace(found, name=name)


def load(directory: str, name: object) -> tuple[str, Bitstream]:
    """:func:`resolve` and :func:`read` ``name``; (path, header)."""
    path = resolve(directory, name)
    return path, read(path, str(name))


# -- the library -----------------------------------------------------------

#: The library's manifest, at the top of the bitstream directory.
MANIFEST = 'manifest.json'
#: A library entry's name (what ``cyborg_nova:bitstream`` takes).
ENTRY_PATTERN = r'[A-Za-z0-9][A-Za-z0-9._-]{0,63}'
_ENTRY_RE = re.compile(ENTRY_PATTERN)
#: Larger manifests are not a library anyone wrote by hand.
MANIFEST_MAX = 1024 * 1024


@dataclasses.dataclass(frozen=True)
class Entry:
    """A named bitstream of the library."""

    name: str
    file: str
    description: str = ''


def manifest_path(directory: str) -> str:
    return os.path.join(directory, MANIFEST)


def library(directory: str) -> dict[str, Entry]:
    """The entries of the library at ``directory``, by name.

    No manifest is an empty library.

    :raises InvalidManifest: it cannot be read, is not JSON, or an entry
        is malformed (a bad name, no file, a file name that could leave
        the directory); the message says which.
    """
    path = manifest_path(directory)
    try:
        with open(path, 'rb') as f:
            raw = f.read(MANIFEST_MAX + 1)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise InvalidManifest('cannot read %s: %s' % (path, exc.strerror))
    if len(raw) > MANIFEST_MAX:
        raise InvalidManifest('%s is larger than %d bytes'
                              % (path, MANIFEST_MAX))
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        # RecursionError: nested deeper than the parser goes.
        raise InvalidManifest('%s is not JSON: %s' % (path, str(exc)[:200]))
    entries = body.get('bitstreams') if isinstance(body, dict) else None
    if not isinstance(entries, dict):
        raise InvalidManifest('%s has no "bitstreams" object' % path)
    found = {}
    for name, entry in entries.items():
        if not _ENTRY_RE.fullmatch(name):
            raise InvalidManifest(
                '%s: entry name %r is not letters, digits and "._-" '
                '(at most 64, starting with a letter or digit)'
                % (path, name[:100]))
        if not isinstance(entry, dict) or not isinstance(
                entry.get('file'), str):
            raise InvalidManifest('%s: entry %s has no "file" string'
                                  % (path, name))
        try:
            check_name(entry['file'])
        except BadName as exc:
            raise InvalidManifest('%s: entry %s: %s' % (path, name, exc))
        description = entry.get('description', '')
        if not isinstance(description, str):
            raise InvalidManifest('%s: entry %s: "description" must be a '
                                  'string' % (path, name))
        found[name] = Entry(name, entry['file'], description)
    return found


def file_of(directory: str, name: object) -> object:
    """The file of library entry ``name``; other names as they are.

    So commands take a library entry or a file name alike.

    :raises InvalidManifest: see :func:`library`.
    """
    if isinstance(name, str) and _ENTRY_RE.fullmatch(name):
        entry = library(directory).get(name)
        if entry is not None:
            return entry.file
    return name


# -- building (tests, fake clouds) -----------------------------------------

def make_gbs(interface_id: str, afu_id: str, payload: bytes = b'',
             name: str = 'afu') -> bytes:
    """A GBS file as OPAE's packager lays it out."""
    metadata = json.dumps({
        'version': 1,
        'platform-name': 'DCP',
        'afu-image': {
            'magic-no': 488605312,
            'interface-uuid': str(uuid.UUID(interface_id)),
            'accelerator-clusters': [{
                'name': name, 'total-contexts': 1,
                'accelerator-type-uuid': str(uuid.UUID(afu_id))}],
        },
    }).encode()
    return (GBS_MAGIC + struct.pack('<I', len(metadata)) + metadata
            + payload)


def make_xclbin(interface_id: str, xclbin_uuid: str,
                payload: bytes = b'', vbnv: str = 'xilinx_u250_gen3x16_'
                'xdma_shell_4_1') -> bytes:
    """An xclbin2 file with no sections (and ``payload`` after them)."""
    header = struct.pack(
        '<QQQHBBHH16s64s16s16sI4x', XCLBIN_FIXED + len(payload), 0, 0,
        0, 2, 2, 1, 0, uuid.UUID(interface_id).bytes,
        vbnv.encode()[:63], uuid.UUID(xclbin_uuid).bytes, b'', 0)
    assert len(header) == XCLBIN_HEADER_SIZE
    top = struct.pack('<8si28s256sQ', XCLBIN_MAGIC, -1, b'\xff' * 28,
                      b'\0' * 256, 0)
    return top + header + payload
