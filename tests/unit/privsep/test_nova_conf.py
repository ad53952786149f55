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

"""privsep.nova_conf: Nova's [pci] device_spec drop-in."""

import grp
import json
import os
import stat

from oslo_config import cfg
import pytest

import privsep
from privsep import nova_conf
from tests.unit.privsep import fakesysfs

NVME = '0000:18:00.0'        # Samsung NVMe, 144d:a808
A10 = '0000:af:00.0'         # 10de:2236
A100_VF = '0000:5f:00.4'     # a VF of the A100 at 0000:5f:00.0
ENTRIES = [
    {'address': NVME, 'vendor_id': '144d', 'product_id': 'a808',
     'resource_class': 'CUSTOM_NVME', 'traits': ['CUSTOM_FAST', 'HW_NVME']},
    {'address': A100_VF, 'physical_network': 'physnet1',
     'remote_managed': False},
    {'address': A10},
]


@pytest.fixture(scope='module')
def tree(tmp_path_factory):
    """One tree for the module: writing the drop-in never changes it."""
    return fakesysfs.build(str(tmp_path_factory.mktemp('host') / 'sys'))


@pytest.fixture
def drop_in(tmp_path):
    directory = tmp_path / 'nova.conf.d'
    directory.mkdir()
    return str(directory / '60-cyborg-nova-pci.conf')


def nova_whitelist(path):
    """The file as nova-compute reads it: Nova's options, Nova's parser."""
    nova_pci_conf = pytest.importorskip('nova.conf.pci')
    from nova.pci import whitelist
    conf = cfg.ConfigOpts()
    nova_pci_conf.register_opts(conf)
    conf([], project='nova', default_config_files=[path],
         default_config_dirs=[])
    return conf, whitelist.Whitelist(conf.pci.device_spec)


def test_writes_the_drop_in(tree, drop_in):
    result = nova_conf._write_device_spec(tree, drop_in, ENTRIES)
    assert result == {'path': drop_in, 'changed': True, 'entries': 3}
    with open(drop_in) as f:
        text = f.read()
    assert text == nova_conf.HEADER + (
        '[pci]\n'
        'device_spec = {"address": "0000:18:00.0", "vendor_id": "144d", '
        '"product_id": "a808", "resource_class": "CUSTOM_NVME", '
        '"traits": "CUSTOM_FAST,HW_NVME"}\n'
        'device_spec = {"address": "0000:5f:00.4", '
        '"physical_network": "physnet1", "remote_managed": "false"}\n'
        'device_spec = {"address": "0000:af:00.0"}\n')
    st = os.stat(drop_in)
    assert stat.S_IMODE(st.st_mode) == 0o640
    assert st.st_gid == os.stat(os.path.dirname(drop_in)).st_gid
    # The temporary file was renamed, not left behind.
    assert os.listdir(os.path.dirname(drop_in)) == [
        os.path.basename(drop_in)]


def test_drop_in_round_trips_through_nova(tree, drop_in):
    nova_conf._write_device_spec(tree, drop_in, ENTRIES)
    conf, whitelist = nova_whitelist(drop_in)
    assert len(conf.pci.device_spec) == 3
    assert [spec.dev_spec_conf for spec in whitelist.specs] == [
        {'address': NVME, 'vendor_id': '144d', 'product_id': 'a808',
         'resource_class': 'CUSTOM_NVME', 'traits': 'CUSTOM_FAST,HW_NVME'},
        {'address': A100_VF, 'physical_network': 'physnet1',
         'remote_managed': 'false'},
        {'address': A10}]
    nvme = {'vendor_id': '144d', 'product_id': 'a808', 'address': NVME,
            'parent_addr': None}
    assert whitelist.device_assignable(nvme) is whitelist.specs[0]
    assert whitelist.specs[0].get_tags() == {
        'resource_class': 'CUSTOM_NVME', 'traits': 'CUSTOM_FAST,HW_NVME'}
    other_card = dict(nvme, product_id='a80a')
    assert whitelist.device_assignable(other_card) is None


def test_empty_list_leaves_no_device_spec(tree, drop_in):
    nova_conf._write_device_spec(tree, drop_in, ENTRIES)
    assert nova_conf._write_device_spec(tree, drop_in, [])['changed']
    conf, whitelist = nova_whitelist(drop_in)
    assert conf.pci.device_spec == [] and whitelist.specs == []


def test_same_content_is_not_rewritten(tree, drop_in):
    nova_conf._write_device_spec(tree, drop_in, ENTRIES)
    inode = os.stat(drop_in).st_ino
    result = nova_conf._write_device_spec(tree, drop_in, ENTRIES)
    assert result['changed'] is False
    assert os.stat(drop_in).st_ino == inode
    os.chmod(drop_in, 0o644)
    assert nova_conf._write_device_spec(tree, drop_in, ENTRIES)['changed']
    assert stat.S_IMODE(os.stat(drop_in).st_mode) == 0o640


def test_configured_group(tree, drop_in):
    try:
        group = grp.getgrnam('daemon')
    except KeyError:
        pytest.skip('no group "daemon" here')
    if os.geteuid() != 0:
        pytest.skip('chown to another group needs root here')
    nova_conf._write_device_spec(tree, drop_in, ENTRIES, group='daemon')
    assert os.stat(drop_in).st_gid == group.gr_gid


@pytest.mark.parametrize('entries, error, message', [
    ({'address': NVME}, privsep.InvalidArgument, 'must be a list'),
    (['{"address": "0000:18:00.0"}'], privsep.InvalidArgument,
     'must be a dict'),
    ([{'address': NVME, 'devname': 'eth0'}], privsep.UnknownAttribute,
     'unknown key'),
    ([{'address': NVME, 'managed': 'no'}], privsep.UnknownAttribute,
     'unknown key'),
    ([{'vendor_id': '144d'}], privsep.InvalidArgument, 'no address'),
    ([{'address': '../' + NVME}], privsep.PathLikeArgument, 'path'),
    ([{'address': '/etc/passwd'}], privsep.PathLikeArgument, 'path'),
    ([{'address': '*:18:00.*'}], privsep.NotAPciAddress, 'not a PCI'),
    ([{'address': '0000:19:00.0'}], privsep.NoSuchDevice, '0000:19:00.0'),
    ([{'address': NVME, 'vendor_id': '8086'}], privsep.InvalidArgument,
     'does not match device'),
    ([{'address': NVME, 'vendor_id': '144D'}], privsep.InvalidArgument,
     'hex'),
    ([{'address': NVME, 'product_id': 0xa808}], privsep.InvalidArgument,
     'string'),
    ([{'address': NVME, 'resource_class': 'custom_nvme'}],
     privsep.InvalidArgument, 'resource class'),
    ([{'address': NVME, 'resource_class': 'CUSTOM_$host'}],
     privsep.InvalidArgument, 'resource class'),
    ([{'address': NVME, 'traits': 'CUSTOM_A,CUSTOM_B'}],
     privsep.InvalidArgument, 'must be a list'),
    ([{'address': NVME, 'traits': ['CUSTOM_A,CUSTOM_B']}],
     privsep.InvalidArgument, 'trait'),
    ([{'address': NVME, 'physical_network': 'net\n[DEFAULT]'}],
     privsep.InvalidArgument, 'physical network'),
    ([{'address': NVME, 'physical_network': 'a' * 65}],
     privsep.InvalidArgument, 'physical network'),
    ([{'address': NVME, 'remote_managed': 'yes'}], privsep.InvalidArgument,
     'true or false'),
    ([{'address': NVME}, {'address': NVME, 'vendor_id': '144d'}],
     privsep.InvalidArgument, 'listed twice'),
    ([{'address': NVME}] * (nova_conf.MAX_ENTRIES + 1), privsep.OutOfRange,
     'at most'),
])
def test_bad_entries_refused_before_writing(tree, drop_in, entries, error,
                                            message):
    nova_conf._write_device_spec(tree, drop_in, ENTRIES)
    with open(drop_in) as f:
        before = f.read()
    with pytest.raises(error, match=message):
        nova_conf._write_device_spec(tree, drop_in, entries)
    with open(drop_in) as f:
        assert f.read() == before
    assert len(os.listdir(os.path.dirname(drop_in))) == 1


@pytest.mark.parametrize('path, group, message', [
    ('relative/60-cyborg-nova-pci.conf', None, 'absolute'),
    ('/nonexistent-dir/60-cyborg-nova-pci.conf', None, 'does not exist'),
    (None, 'no-such-group-here', 'no group'),
])
def test_host_not_ready(tree, drop_in, path, group, message):
    with pytest.raises(privsep.NotPossible, match=message):
        nova_conf._write_device_spec(tree, path or drop_in, ENTRIES, group)
    assert not os.path.exists(drop_in)


def test_values_are_json(tree, drop_in):
    nova_conf._write_device_spec(tree, drop_in, ENTRIES[:1])
    with open(drop_in) as f:
        lines = [line for line in f if line.startswith('device_spec')]
    assert json.loads(lines[0].split(' = ', 1)[1])['address'] == NVME


def test_entrypoint_writes_the_configured_file(tree, drop_in, daemon_conf):
    daemon_conf.config(pci_device_spec_file=drop_in,
                       group='cyborg_nova_privsep')
    result = privsep.nova_conf.write_device_spec([{'address': NVME}])
    assert result['path'] == drop_in and result['changed']
    with open(drop_in) as f:
        assert f.read().endswith('device_spec = {"address": "%s"}\n' % NVME)
