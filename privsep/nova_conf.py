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

"""Writing Nova's ``[pci] device_spec`` drop-in.

The one file this module writes is named by the daemon's own
``[cyborg_nova_privsep] pci_device_spec_file``; callers pass only the
entries, as dicts with a fixed set of typed keys, and every entry is
checked (against sysfs too) before the file is touched. The file is
replaced atomically, so nova-compute never reads half of it.
"""

from __future__ import annotations

import grp
import json
import os
import re
import tempfile

import privsep
from privsep import _common

MODE = 0o640
#: Far more than a host has functions to pass through, small enough that
#: a runaway caller cannot fill /etc.
MAX_ENTRIES = 4096
HEADER = ('# Written by cyborg-nova ("cyborg-nova whitelist-sync"); it is\n'
          '# replaced on every sync: keep your own entries in nova.conf.\n')

_HEX4_RE = re.compile(r'[0-9a-f]{4}')
# Placement names as Nova sends them: already normalised, so the file
# says exactly what Placement will show.
_PLACEMENT_NAME_RE = re.compile(r'[A-Z0-9_]{1,255}')
_PHYSNET_RE = re.compile(r'[A-Za-z0-9_.-]{1,64}')

# The device_spec keys this project writes, in the order they are
# written; Nova allows more (devname, managed, trusted...) that nothing
# here needs.
KEYS = ('address', 'vendor_id', 'product_id', 'physical_network',
        'remote_managed', 'resource_class', 'traits')


def _sysfs_id(dev_dir: str, name: str) -> str | None:
    value = _common.read_attr(os.path.join(dev_dir, name))
    try:
        return '%04x' % int(value, 16) if value else None
    except ValueError:
        return None


def _entry(sysfs_root: str, index: int, entry: object) -> dict:
    """One validated entry with Nova's string values, in :data:`KEYS` order.

    :raises InvalidArgument: (or a subclass) anything not allowed.
    """
    where = 'entry %d' % index
    if not isinstance(entry, dict):
        raise privsep.InvalidArgument(
            '%s must be a dict, not %s' % (where, type(entry).__name__))
    unknown = sorted(str(k) for k in entry if k not in KEYS)
    if unknown:
        raise privsep.UnknownAttribute(
            '%s: unknown key(s) %s; allowed: %s'
            % (where, ', '.join(unknown), ', '.join(KEYS)))
    if 'address' not in entry:
        # Without an address an entry matches every device of a model,
        # possibly ones cyborg-nova manages: only named devices go here.
        raise privsep.InvalidArgument('%s has no address' % where)
    address = entry['address']
    dev = _common.device_dir(sysfs_root, address)
    out = {'address': address}
    for key in ('vendor_id', 'product_id'):
        if key not in entry:
            continue
        value = _common.validate_identifier(
            '%s %s' % (where, key), entry[key], _HEX4_RE,
            'four lowercase hex digits')
        actual = _sysfs_id(dev, 'vendor' if key == 'vendor_id'
                           else 'device')
        if value != actual:
            raise privsep.InvalidArgument(
                '%s: %s %s does not match device %s (%s)'
                % (where, key, value, address, actual))
        out[key] = value
    if 'physical_network' in entry:
        out['physical_network'] = _common.validate_identifier(
            '%s physical_network' % where, entry['physical_network'],
            _PHYSNET_RE, 'a physical network name (letters, digits, '
            '"_", "." and "-", at most 64)')
    if 'remote_managed' in entry:
        if not isinstance(entry['remote_managed'], bool):
            raise privsep.InvalidArgument(
                '%s: remote_managed must be true or false, not %r'
                % (where, entry['remote_managed']))
        out['remote_managed'] = ('true' if entry['remote_managed']
                                 else 'false')
    if 'resource_class' in entry:
        out['resource_class'] = _common.validate_identifier(
            '%s resource_class' % where, entry['resource_class'],
            _PLACEMENT_NAME_RE, 'a resource class name ([A-Z0-9_])')
    if 'traits' in entry:
        traits = entry['traits']
        if not isinstance(traits, (list, tuple)):
            raise privsep.InvalidArgument(
                '%s: traits must be a list, not %s'
                % (where, type(traits).__name__))
        names = [_common.validate_identifier(
            '%s trait' % where, trait, _PLACEMENT_NAME_RE,
            'a trait name ([A-Z0-9_])') for trait in traits]
        if names:
            # Nova's device_spec takes traits comma-separated.
            out['traits'] = ','.join(names)
    return {key: out[key] for key in KEYS if key in out}


def render(entries: list[dict]) -> str:
    """The drop-in's text for already validated entries."""
    lines = ['device_spec = %s\n' % json.dumps(entry) for entry in entries]
    return HEADER + '[pci]\n' + ''.join(lines)


@privsep.nova_config.entrypoint
def write_device_spec(entries: list[dict]) -> dict:
    """Replace the drop-in with ``[pci] device_spec`` for ``entries``.

    Each entry is a dict with ``address`` (a PCI address of a device on
    this host) and optionally ``vendor_id``, ``product_id`` (must match
    the device), ``physical_network``, ``remote_managed`` (a bool),
    ``resource_class`` and ``traits`` (a list of names). An empty list
    writes a drop-in with no device_spec.

    :returns: ``{'path': <the drop-in>, 'changed': <bool>, 'entries': N}``.
    :raises InvalidArgument: (or a subclass) a bad entry; nothing was
        written.
    :raises NotPossible: the drop-in's directory or group does not exist.
    """
    conf = _common.privileged_conf()
    return _write_device_spec(conf.sysfs_root, conf.pci_device_spec_file,
                              entries, conf.pci_device_spec_group)


def _write_device_spec(sysfs_root: str, spec_file: str, entries: list,
                       group: str | None = None) -> dict:
    if not isinstance(entries, (list, tuple)):
        raise privsep.InvalidArgument(
            'entries must be a list, not %s' % type(entries).__name__)
    if len(entries) > MAX_ENTRIES:
        raise privsep.OutOfRange('%d entries; at most %d'
                                 % (len(entries), MAX_ENTRIES))
    checked = [_entry(sysfs_root, n, e) for n, e in enumerate(entries)]
    seen: set[str] = set()
    for entry in checked:
        if entry['address'] in seen:
            raise privsep.InvalidArgument(
                '%s is listed twice' % entry['address'])
        seen.add(entry['address'])
    if not os.path.isabs(spec_file):
        raise privsep.NotPossible(
            '[cyborg_nova_privsep] pci_device_spec_file %r is not an '
            'absolute path' % spec_file)
    directory = os.path.dirname(spec_file)
    if not os.path.isdir(directory):
        raise privsep.NotPossible(
            '%s does not exist; create it and start nova-compute with '
            '--config-dir %s' % (directory, directory))
    if group:
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            raise privsep.NotPossible(
                '[cyborg_nova_privsep] pci_device_spec_group: no group %r'
                % group)
    else:
        gid = os.stat(directory).st_gid
    content = render(checked)
    result = {'path': spec_file, 'changed': True, 'entries': len(checked)}
    if _unchanged(spec_file, content, gid):
        result['changed'] = False
        return result

    fd, tmp = tempfile.mkstemp(
        dir=directory, prefix='.%s.' % os.path.basename(spec_file),
        suffix='.tmp')
    try:
        with os.fdopen(fd, 'w', encoding='utf-8') as f:
            f.write(content)
            f.flush()
            # Mode before group: after a chown by a non-root daemon the
            # chmod would need CAP_FOWNER.
            os.fchmod(f.fileno(), MODE)
            if os.fstat(f.fileno()).st_gid != gid:
                os.fchown(f.fileno(), -1, gid)
            os.fsync(f.fileno())
        os.replace(tmp, spec_file)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    # The rename is durable only once the directory is on disk too.
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return result


def _unchanged(spec_file: str, content: str, gid: int) -> bool:
    """Whether the drop-in already holds ``content`` as it should."""
    try:
        st = os.stat(spec_file)
        with open(spec_file, encoding='utf-8') as f:
            current = f.read()
    except (OSError, UnicodeDecodeError):
        return False
    return (current == content and (st.st_mode & 0o7777) == MODE
            and st.st_gid == gid)
