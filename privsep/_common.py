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

"""Validation and sysfs writes shared by the privileged modules.

No entrypoints here: only the checks every entrypoint runs on its
arguments before it writes anything, the one function that writes a
sysfs attribute, and the privileged side's view of its configuration.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import threading

from oslo_config import cfg

from cyborg_drivers import device as device_model
from cyborg_nova.conf import privsep as privsep_conf
import privsep

LOG = logging.getLogger(__name__)

_register_lock = threading.Lock()
# Host and PCI-to-PCI bridges: never an accelerator, and taking one from
# its driver (pcieport) cuts off everything behind it.
_BRIDGE_CLASS = 0x06


def privileged_conf() -> cfg.ConfigOpts:
    """``[cyborg_nova_privsep]`` as the privsep daemon was configured.

    Runs inside the daemon, whose global ``cfg.CONF`` privsep-helper
    parsed from its ``--config-file`` arguments before any of our code was
    imported, so the options are registered here, on first use, rather
    than at import. The lock keeps two first calls on the daemon's thread
    pool from registering at once.
    """
    with _register_lock:
        privsep_conf.register_opts(cfg.CONF)
    return cfg.CONF[privsep_conf.GROUP.name]


def sysfs_root() -> str:
    """The daemon's sysfs root; callers never choose it."""
    return privileged_conf().sysfs_root


def reject_path_like(name: str, value: object) -> str:
    """``value`` if it is a string that cannot name another file.

    :raises InvalidArgument: not a string.
    :raises PathLikeArgument: contains ``/``, ``..`` or a NUL byte.
    """
    if not isinstance(value, str):
        raise privsep.InvalidArgument(
            '%s must be a string, not %s' % (name, type(value).__name__))
    if '/' in value or '..' in value or '\0' in value:
        raise privsep.PathLikeArgument(
            '%s %r looks like a path; only a plain name is accepted'
            % (name, value))
    return value


def pci_address(value: object, name: str = 'address') -> str:
    """``value`` if it is a full, lowercase PCI address.

    :raises PathLikeArgument: it looks like a path.
    :raises NotAPciAddress: anything else that is not an address.
    """
    reject_path_like(name, value)
    if not device_model.is_pci_address(value):
        raise privsep.NotAPciAddress(
            '%s %r is not a PCI address (expected the full, lowercase '
            'form, e.g. 0000:3b:00.0)' % (name, value))
    return value


def device_dir(root: str, address: object) -> str:
    """The sysfs directory of the PCI function at ``address``.

    :raises PathLikeArgument, NotAPciAddress: a bad address.
    :raises NoSuchDevice: no such function on the bus under ``root``.
    """
    address = pci_address(address)
    path = os.path.join(root, 'bus', 'pci', 'devices', address)
    real_root = os.path.realpath(root)
    # bus/pci/devices/<address> is the kernel's link into devices/; a link
    # leading out of the sysfs root is not a device we may write to.
    if (not os.path.isdir(path)
            or not os.path.realpath(path).startswith(real_root + os.sep)):
        raise privsep.NoSuchDevice(
            'no PCI device %s on this host (%s)'
            % (address, os.path.join(root, 'bus', 'pci', 'devices')))
    return path


def read_attr(path: str) -> str | None:
    """An attribute's stripped text; None if it cannot be read."""
    try:
        with open(path, 'rb') as f:
            return f.read().decode('ascii', 'replace').strip()
    except OSError:
        return None


def require_attr(path: str, what: str) -> str:
    """``path`` if the attribute file exists.

    :raises UnknownAttribute: it does not; ``what`` says what is missing.
    """
    if not os.path.isfile(path):
        raise privsep.UnknownAttribute(
            '%s (%s does not exist)' % (what, path))
    return path


def refuse_bridge(dev_dir: str, address: str) -> None:
    """Refuse to rebind a bridge, whatever the caller asked.

    :raises InvalidArgument: the function is a host or PCI bridge.
    """
    value = read_attr(os.path.join(dev_dir, 'class'))
    try:
        base_class = int(value, 16) >> 16 if value else None
    except ValueError:
        base_class = None
    if base_class == _BRIDGE_CLASS:
        raise privsep.InvalidArgument(
            '%s is a bridge (class %s); bridges are never rebound'
            % (address, value))


def write_attr(path: str, value: str) -> None:
    """Write ``value`` to one sysfs attribute in a single write(2).

    The file must exist: O_CREAT is never used, so a bad path can only
    fail, never create a file. O_TRUNC is harmless on sysfs (the shell's
    ``echo 1 >`` uses it too) and keeps a plain-file fake tree exact.

    :raises OSError: the kernel refused the value; the message names the
        file and the value.
    """
    data = value.encode('ascii')
    LOG.info('Writing %r to %s', value, path)
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW
                 | os.O_CLOEXEC)
    try:
        written = os.write(fd, data)
    except OSError as exc:
        raise OSError(exc.errno, 'writing %r to %s: %s'
                      % (value, path, exc.strerror), path)
    finally:
        os.close(fd)
    if written != len(data):
        raise OSError(errno.EIO, 'short write of %r to %s' % (value, path),
                      path)


def validate_identifier(name: str, value: object, pattern: re.Pattern,
                        description: str) -> str:
    """``value`` if it is a string matching ``pattern`` in full.

    :raises PathLikeArgument: it looks like a path.
    :raises InvalidArgument: it does not match.
    """
    reject_path_like(name, value)
    if not pattern.fullmatch(value):
        raise privsep.InvalidArgument(
            '%s %r is not %s' % (name, value, description))
    return value
