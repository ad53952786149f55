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

"""privsep.mdev: creating and removing mediated devices (vGPUs)."""

import os

import pytest

import privsep
from privsep import mdev
from tests.unit.privsep import fakesysfs

T4_VGPU = '0000:3b:00.0'   # Tesla T4 offering nvidia-222 and nvidia-223
T4 = '0000:3c:00.0'        # Tesla T4 without mdev types
UUID = '4b20d080-1b54-4048-85b3-a6a62d165c01'


def create_attr(tree, type_id='nvidia-222'):
    return fakesysfs.device(tree, T4_VGPU, 'mdev_supported_types', type_id,
                            'create')


def test_create_writes_the_uuid_to_the_type(tree, writes):
    assert mdev._create(tree, T4_VGPU, 'nvidia-223', UUID) == UUID
    assert writes == [(os.path.relpath(create_attr(tree, 'nvidia-223'),
                                       tree), UUID)]
    assert fakesysfs.read(create_attr(tree, 'nvidia-223')) == UUID


def test_remove_writes_1_to_the_mdev(tree, writes):
    path = fakesysfs.add_mdev(tree, T4_VGPU, UUID)
    mdev._remove(tree, T4_VGPU, UUID)
    assert writes == [(os.path.relpath(os.path.join(path, 'remove'), tree),
                       '1')]


@pytest.mark.parametrize('type_id, error', [
    ('nvidia-999', privsep.UnknownAttribute),        # not offered
    ('../nvidia-222', privsep.PathLikeArgument),
    ('nvidia-222/create', privsep.PathLikeArgument),
    ('..', privsep.PathLikeArgument),
    ('nvidia 222', privsep.InvalidArgument),
    ('nvidia-222\n', privsep.InvalidArgument),
    ('', privsep.InvalidArgument),
    (222, privsep.InvalidArgument),
])
def test_bad_type_refused_before_any_write(tree, type_id, error):
    before = fakesysfs.snapshot(tree)
    with pytest.raises(error):
        mdev._create(tree, T4_VGPU, type_id, UUID)
    assert fakesysfs.snapshot(tree) == before


def test_unknown_type_names_what_is_offered(tree):
    with pytest.raises(privsep.UnknownAttribute,
                       match='nvidia-222, nvidia-223'):
        mdev._create(tree, T4_VGPU, 'nvidia-999', UUID)
    with pytest.raises(privsep.UnknownAttribute, match='none'):
        mdev._create(tree, T4, 'nvidia-222', UUID)


@pytest.mark.parametrize('mdev_uuid, error', [
    (UUID.upper(), privsep.InvalidArgument),
    (UUID.replace('-', ''), privsep.InvalidArgument),
    ('{%s}' % UUID, privsep.InvalidArgument),
    ('not-a-uuid', privsep.InvalidArgument),
    ('../' + UUID, privsep.PathLikeArgument),
    (None, privsep.InvalidArgument),
])
def test_non_canonical_uuid_refused(tree, mdev_uuid, error):
    fakesysfs.add_mdev(tree, T4_VGPU, UUID)
    before = fakesysfs.snapshot(tree)
    with pytest.raises(error):
        mdev._create(tree, T4_VGPU, 'nvidia-222', mdev_uuid)
    with pytest.raises(error):
        mdev._remove(tree, T4_VGPU, mdev_uuid)
    assert fakesysfs.snapshot(tree) == before


@pytest.mark.parametrize('parent, error', [
    ('0000:3b:00.0/..', privsep.PathLikeArgument),
    ('0000:3b:0.0', privsep.NotAPciAddress),
    ('0000:3d:00.0', privsep.NoSuchDevice),
])
def test_bad_parent_refused(tree, parent, error):
    before = fakesysfs.snapshot(tree)
    with pytest.raises(error):
        mdev._create(tree, parent, 'nvidia-222', UUID)
    with pytest.raises(error):
        mdev._remove(tree, parent, UUID)
    assert fakesysfs.snapshot(tree) == before


def test_existing_mdev_is_not_created_again(tree):
    fakesysfs.add_mdev(tree, T4_VGPU, UUID)
    before = fakesysfs.snapshot(tree)
    with pytest.raises(privsep.InvalidArgument, match='already exists'):
        mdev._create(tree, T4_VGPU, 'nvidia-222', UUID)
    assert fakesysfs.snapshot(tree) == before


def test_remove_only_from_its_own_parent(tree):
    fakesysfs.add_mdev(tree, T4_VGPU, UUID)
    before = fakesysfs.snapshot(tree)
    with pytest.raises(privsep.NoSuchDevice, match=UUID):
        mdev._remove(tree, T4, UUID)
    assert fakesysfs.snapshot(tree) == before


def test_entrypoints_in_process(tree, daemon_conf):
    assert privsep.mdev.create(T4_VGPU, 'nvidia-222', UUID) == UUID
    assert fakesysfs.read(create_attr(tree)) == UUID
    path = fakesysfs.add_mdev(tree, T4_VGPU, UUID)
    assert privsep.mdev.remove(T4_VGPU, UUID) is None
    assert fakesysfs.read(os.path.join(path, 'remove')) == '1'
