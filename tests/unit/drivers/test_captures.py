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

"""Discovery on captures of real hosts, and the capture tool itself.

A capture (``tests/captures/<host>/tree``) is judged twice: against what
discovery said on the host's live ``/sys`` when it was captured, and
against the vendor's own tool (``nvidia-smi``) for the device's identity.
The capture tool is then checked on every shipped profile's tree: the
capture of a tree must discover exactly as the tree does.
"""

import csv
import json
import os

from oslo_config import cfg
import pytest

from cyborg_drivers import discovery
from cyborg_drivers.fake import capture
from cyborg_drivers.fake import hosttree
from cyborg_drivers import loader
from cyborg_nova.cmd import discover as discover_cmd

HERE = os.path.dirname(os.path.abspath(__file__))
CAPTURES = os.path.join(HERE, os.pardir, os.pardir, 'captures')
HOSTS = sorted(name for name in os.listdir(CAPTURES)
               if os.path.isdir(os.path.join(CAPTURES, name)))
# What "cyborg-nova discover" runs by default: every installed driver
# that needs no configuration.
DEFAULT = loader.default_names()


def discover(root, names=DEFAULT):
    conf = cfg.ConfigOpts()
    conf([])
    return discovery.Discoverer(loader.load(conf, names), root).discover()


def rows(result, names=None):
    """The accelerators as the discover command's JSON shows them.

    ``names``: those columns only; by default every column that comes
    from discovery (not those read from the host's state store).
    """
    if names is None:
        names = [n for n in discover_cmd.LONG_COLUMNS
                 if n not in discover_cmd.STORE_COLUMNS]
    return json.loads(json.dumps([
        {name: a.to_dict()[name] for name in names}
        for a in result.accelerators]))


def test_there_are_captures():
    assert HOSTS, 'no captured hosts under %s' % CAPTURES


@pytest.mark.parametrize('host', HOSTS)
def test_capture_discovers_as_the_live_host_did(host):
    base = os.path.join(CAPTURES, host)
    with open(os.path.join(base, 'discover.json')) as f:
        live = json.load(f)
    assert live, 'the live host reported nothing: not a useful capture'
    # The columns the command had when the host was captured.
    assert rows(discover(os.path.join(base, 'tree')), list(live[0])) == live


@pytest.mark.parametrize('host', [h for h in HOSTS if os.path.exists(
    os.path.join(CAPTURES, h, 'nvidia-smi.csv'))])
def test_capture_is_the_gpu_nvidia_smi_saw(host):
    base = os.path.join(CAPTURES, host)
    with open(os.path.join(base, 'nvidia-smi.csv')) as f:
        gpus = [{k.strip(): v.strip() for k, v in row.items()}
                for row in csv.DictReader(f)]
    result = discover(os.path.join(base, 'tree'), ['nvidia_gpu'])
    by = result.by_address()
    assert len(by) == len(gpus)
    for gpu in gpus:
        # nvidia-smi: "00000000:00:06.0", device "0x233510DE" (device id
        # above the vendor id), subsystem likewise.
        domain, rest = gpu['pci.bus_id'].split(':', 1)
        address = '%04x:%s' % (int(domain, 16), rest.lower())
        device = int(gpu['pci.device_id'], 16)
        subsystem = int(gpu['pci.sub_device_id'], 16)
        acc = by[address]
        assert (int(acc.vendor_id, 16), int(acc.product_id, 16)) == (
            device & 0xffff, device >> 16)
        assert (int(acc.subsystem_vendor_id, 16),
                int(acc.subsystem_product_id, 16)) == (
            subsystem & 0xffff, subsystem >> 16)
        assert acc.traits[0] == 'CUSTOM_NVIDIA_%04X' % (device >> 16)
        if gpu.get('mig.mode.current') in ('Disabled', '[N/A]'):
            assert (acc.resource_class, acc.total, acc.units) == (
                'PGPU', 1, (address,))


@pytest.mark.parametrize('profile', hosttree.PROFILE_NAMES)
def test_a_capture_of_a_tree_discovers_as_the_tree(tmp_path, profile):
    tree = str(tmp_path / 'tree')
    hosttree.build_tree(profile, tree)
    manifest = capture.capture(str(tmp_path / 'capture'), tree)
    assert manifest['skipped'] == {}
    names = DEFAULT + ['nic_sriov']
    want = rows(discover(tree, names))
    assert want, 'the profile %s has no accelerators' % profile
    assert rows(discover(str(tmp_path / 'capture'), names)) == want


def test_a_capture_of_some_functions_takes_their_vfs_and_bridges(tmp_path):
    tree = str(tmp_path / 'tree')
    hosttree.build_tree('gpu-host', tree)
    # The A100 at 5f:00.0: its VFs come along, its neighbours do not.
    manifest = capture.capture(str(tmp_path / 'capture'), tree,
                               ['0000:5f:00.0'])
    functions = set(manifest['functions'])
    assert '0000:5f:00.0' in functions
    assert '0000:5f:00.4' in functions
    assert '0000:3b:00.0' not in functions
    result = discover(str(tmp_path / 'capture'), ['nvidia_gpu'])
    assert [a.address for a in result.accelerators] == ['0000:5f:00.0']
    assert result.accelerators[0].total == 4


def test_serial_numbers_are_not_copied(tmp_path):
    root = tmp_path / 'sys'
    hosttree.build_tree('gpu-host', str(root))
    path = root / 'bus' / 'pci' / 'devices' / '0000:3b:00.0'
    (path / 'serial_number').write_text('ae-51-ed-a5-cd-2d-b0-48\n')
    capture.capture(str(tmp_path / 'capture'), str(root), ['0000:3b:00.0'])
    copied = (tmp_path / 'capture' / 'bus' / 'pci' / 'devices'
              / '0000:3b:00.0' / 'serial_number')
    assert copied.read_text() == '00-00-00-00-00-00-00-00\n'


def test_bar_rom_and_vpd_are_never_read(tmp_path):
    root = tmp_path / 'sys'
    hosttree.build_tree('gpu-host', str(root))
    path = root / 'bus' / 'pci' / 'devices' / '0000:3b:00.0'
    for name in ('resource0', 'resource1_wc', 'rom', 'vpd'):
        # A fifo: opening it for reading would block the capture.
        os.mkfifo(path / name)
    capture.capture(str(tmp_path / 'capture'), str(root), ['0000:3b:00.0'])
    copied = tmp_path / 'capture' / 'bus' / 'pci' / 'devices' / '0000:3b:00.0'
    assert (copied / 'vendor').read_text() == '0x10de\n'
    for name in ('resource0', 'resource1_wc', 'rom', 'vpd'):
        assert not (copied / name).exists()


@pytest.mark.parametrize('args, message', [
    (['--address', '0000:3B:00.0'], 'not a PCI address'),
    (['--address', '0000:99:00.0'], 'not on the bus'),
])
def test_bad_addresses_are_refused_and_nothing_is_written(
        tmp_path, capsys, args, message):
    root = str(tmp_path / 'sys')
    hosttree.build_tree('gpu-host', root)
    dest = tmp_path / 'capture'
    assert capture.main(['--sysfs-root', root, str(dest)] + args) == 2
    assert message in capsys.readouterr().err
    assert not dest.exists()
    assert [p.name for p in tmp_path.iterdir()] == ['sys']


def test_a_destination_in_use_is_refused(tmp_path, capsys):
    root = str(tmp_path / 'sys')
    hosttree.build_tree('gpu-host', root)
    dest = tmp_path / 'capture'
    dest.mkdir()
    (dest / 'keep').write_text('mine')
    assert capture.main(['--sysfs-root', root, str(dest)]) == 2
    assert 'not an empty directory' in capsys.readouterr().err
    assert [p.name for p in dest.iterdir()] == ['keep']


def test_no_pci_bus_is_refused(tmp_path, capsys):
    assert capture.main(['--sysfs-root', str(tmp_path),
                         str(tmp_path / 'capture')]) == 2
    assert 'no PCI bus to capture' in capsys.readouterr().err
