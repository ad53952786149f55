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

"""Privileged mediated device (mdev) operations: create and remove.

A mediated device (a vGPU, for instance) is created by writing a uuid to
``mdev_supported_types/<type>/create`` of its parent PCI function and
removed by writing 1 to ``<parent>/<uuid>/remove``. The caller names the
parent by PCI address, the type by its id and the device by its uuid; the
type must be one the parent offers and the uuid must be in canonical
form, so no argument can lead anywhere else in sysfs.
"""

from __future__ import annotations

import os
import re
import uuid

import privsep
from privsep import _common

# What the kernel's mdev vendor drivers use (nvidia-222, i915-GVTg_V5_4,
# mtty-2): checked before the type is looked up in sysfs at all.
_TYPE_ID_RE = re.compile(r'[A-Za-z0-9_-]+')


def _canonical_uuid(value: object) -> str:
    """``value`` if it is a uuid in canonical (lowercase, dashed) form.

    :raises InvalidArgument: (or a subclass) anything else.
    """
    _common.reject_path_like('mdev_uuid', value)
    try:
        canonical = str(uuid.UUID(value))
    except ValueError:
        canonical = None
    if canonical != value:
        raise privsep.InvalidArgument(
            'mdev_uuid %r is not a uuid in canonical form (e.g. '
            '%s)' % (value, uuid.UUID(int=0)))
    return value


def _type_dir(dev_dir: str, parent_address: str, type_id: object) -> str:
    """The sysfs directory of a type the parent offers.

    :raises InvalidArgument: (or a subclass) a malformed type id.
    :raises UnknownAttribute: the parent offers no such type.
    """
    _common.validate_identifier(
        'type_id', type_id, _TYPE_ID_RE,
        'an mdev type id (letters, digits, "_" and "-")')
    types_dir = os.path.join(dev_dir, 'mdev_supported_types')
    try:
        offered = sorted(os.listdir(types_dir))
    except OSError:
        offered = []
    if type_id not in offered:
        raise privsep.UnknownAttribute(
            'mdev type %s is not offered by %s (mdev_supported_types: '
            '%s)' % (type_id, parent_address, ', '.join(offered) or 'none'))
    return os.path.join(types_dir, type_id)


@privsep.sysfs_admin.entrypoint
def create(parent_address: str, type_id: str, mdev_uuid: str) -> str:
    """Create mediated device ``mdev_uuid`` of ``type_id`` on a parent.

    :returns: ``mdev_uuid``.
    :raises InvalidArgument: (or a subclass) a bad or unknown parent
        address, a type the parent does not offer, a uuid that is not
        canonical or already exists; nothing was written.
    """
    return _create(_common.sysfs_root(), parent_address, type_id, mdev_uuid)


def _create(sysfs_root: str, parent_address: str, type_id: str,
            mdev_uuid: str) -> str:
    dev = _common.device_dir(sysfs_root, parent_address)
    type_dir = _type_dir(dev, parent_address, type_id)
    mdev_uuid = _canonical_uuid(mdev_uuid)
    create_attr = _common.require_attr(
        os.path.join(type_dir, 'create'),
        'mdev type %s of %s cannot be created' % (type_id, parent_address))
    if os.path.lexists(os.path.join(dev, mdev_uuid)):
        raise privsep.InvalidArgument(
            'mediated device %s already exists on %s'
            % (mdev_uuid, parent_address))

    _common.write_attr(create_attr, mdev_uuid)
    return mdev_uuid


@privsep.sysfs_admin.entrypoint
def remove(parent_address: str, mdev_uuid: str) -> None:
    """Remove mediated device ``mdev_uuid`` from its parent.

    :raises InvalidArgument: (or a subclass) a bad or unknown parent
        address, a uuid that is not canonical; nothing was written.
    :raises NoSuchDevice: the parent has no such mediated device.
    """
    _remove(_common.sysfs_root(), parent_address, mdev_uuid)


def _remove(sysfs_root: str, parent_address: str, mdev_uuid: str) -> None:
    dev = _common.device_dir(sysfs_root, parent_address)
    mdev_uuid = _canonical_uuid(mdev_uuid)
    # The mdev's directory is a child of its parent's: looking it up
    # there also proves the device belongs to this parent.
    mdev_dir = os.path.join(dev, mdev_uuid)
    if not os.path.isdir(mdev_dir):
        raise privsep.NoSuchDevice(
            'no mediated device %s on %s' % (mdev_uuid, parent_address))
    remove_attr = _common.require_attr(
        os.path.join(mdev_dir, 'remove'),
        'mediated device %s cannot be removed' % mdev_uuid)

    _common.write_attr(remove_attr, '1')
