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

"""The cyborg-nova command as an operator runs it, in a subprocess."""

import json
import os

import pytest

from cyborg_nova.cmd import deprecated
from cyborg_nova import store as state_store
from tests.functional.clirun import cli

KEYS = {'address', 'vendor_id', 'product_id', 'driver', 'resource_class',
        'traits', 'total', 'numa_node'}
EXPECTED = {
    'gpu-host': ['0000:3b:00.0', '0000:3c:00.0', '0000:5e:00.0',
                 '0000:5f:00.0', '0000:86:00.0', '0000:87:00.0',
                 '0000:af:00.0', '0000:d8:00.0'],
    'fpga-host': ['0000:5e:00.0', '0000:af:00.0', '0000:d8:00.0'],
    'crypto-nic-host': ['0000:6b:00.0', '0000:70:00.0', '0000:e8:00.0'],
    'mixed-host': ['0000:3b:00.0', '0000:3c:00.0', '0000:86:00.0',
                   '0000:af:00.0', '0000:d8:00.0'],
}


@pytest.mark.parametrize('profile', sorted(EXPECTED))
def test_discover_json(host_tree, profile):
    root = host_tree(profile)
    rc, out, err = cli('discover', '--sysfs-root', root, '-f', 'json')
    assert rc == 0, err
    rows = json.loads(out)
    assert [r['address'] for r in rows] == EXPECTED[profile]
    for row in rows:
        assert KEYS <= set(row)
        assert isinstance(row['traits'], list) and row['traits']
        assert isinstance(row['total'], int)


def test_discover_nics_with_config(host_tree, tmp_path):
    root = host_tree('crypto-nic-host')
    conf = tmp_path / 'nova.conf'
    conf.write_text('[cyborg_nic_sriov]\n'
                    'physical_device_mappings = physnet1:ens1f0\n')
    rc, out, err = cli('discover', '--sysfs-root', root, '--driver',
                       'nic_sriov', '-f', 'json', config=str(conf))
    assert rc == 0, err
    rows = json.loads(out)
    assert [(r['address'], r['resource_class'], r['total'])
            for r in rows] == [('0000:3b:00.0', 'CUSTOM_NIC', 64)]
    assert 'CUSTOM_PHYSNET1' in rows[0]['traits']


def test_driver_filter(host_tree):
    root = host_tree('fpga-host')
    rc, out, _ = cli('discover', '--sysfs-root', root, '--driver',
                     'xilinx_fpga', '-f', 'json')
    assert rc == 0
    assert [r['driver'] for r in json.loads(out)] == ['xilinx_fpga']
    rc, out, _ = cli('discover', '--sysfs-root', root, '--driver',
                     'intel_qat', '-f', 'json')
    assert rc == 0 and json.loads(out) == []


def test_columns_and_table(host_tree):
    root = host_tree('fpga-host')
    rc, out, _ = cli('discover', '--sysfs-root', root, '-f', 'value',
                     '-c', 'address', '-c', 'total')
    assert rc == 0
    assert out.split('\n')[:3] == ['0000:5e:00.0 1', '0000:af:00.0 1',
                                   '0000:d8:00.0 1']
    rc, out, _ = cli('discover', '--sysfs-root', root, '--long')
    assert rc == 0 and 'CUSTOM_FPGA_INTEL_PAC_ARRIA10' in out


@pytest.mark.parametrize('args, message', [
    (['discover', '--sysfs-root', '/nonexistent'],
     '/nonexistent is not a sysfs tree with a PCI bus'),
    (['discover', '--driver', 'warp_drive'],
     "unknown driver 'warp_drive'; installed drivers: fake, generic"),
])
def test_user_errors_are_one_line(args, message):
    rc, out, err = cli(*args)
    assert rc == 1
    assert 'Traceback' not in err
    assert len(err.strip().splitlines()) == 1
    assert err.startswith(message)


def test_bad_generic_config_is_one_line(tmp_path, host_tree):
    conf = tmp_path / 'nova.conf'
    conf.write_text('[cyborg_generic]\ndevice_spec = {"vendor": 1}\n')
    rc, _, err = cli('discover', '--sysfs-root', host_tree('fpga-host'),
                     '--driver', 'generic', config=str(conf))
    assert rc == 1 and 'Traceback' not in err
    assert err.startswith('[cyborg_generic] device_spec')


def test_missing_config_file_is_one_line():
    rc, _, err = cli('driver-list', config='/nonexistent/nova.conf')
    assert rc == 1 and 'Traceback' not in err
    assert '/nonexistent/nova.conf' in err


@pytest.mark.parametrize('command', ['discover', 'driver-list'])
def test_help(command):
    rc, out, _ = cli(command, '--help')
    assert rc == 0
    assert 'usage: cyborg-nova %s' % command in out


def test_driver_list():
    rc, out, _ = cli('driver-list', '-f', 'json')
    assert rc == 0
    rows = {r['name']: r for r in json.loads(out)}
    assert set(rows) == {'fake', 'generic', 'intel_fpga', 'intel_qat',
                         'nic_sriov', 'nvidia_gpu', 'xilinx_fpga'}
    assert rows['nvidia_gpu']['enabled'] is True
    assert rows['generic']['needs_config'] is True
    assert rows['nic_sriov']['config_group'] == 'cyborg_nic_sriov'


#: A run of each renamed command that reaches its action and changes
#: nothing: arguments it refuses, or a dry run.
RENAMED_RUNS = {
    'driver-install': ['warp_drive'],
    'driver-uninstall': ['warp_drive'],
    'driver-update': ['warp_drive', '--num-vfs', '1'],
    'instance-attach': ['not-a-uuid', '--device', '0000:3b:00.0'],
    'instance-detach': ['not-a-uuid', '--device', '0000:3b:00.0'],
    'whitelist-show': [],
    'whitelist-sync': ['--dry-run'],
}


@pytest.mark.parametrize('old, new', sorted(deprecated.RENAMED.items()))
def test_an_old_name_runs_its_command_and_warns(old, new, tmp_path,
                                                host_tree, monkeypatch):
    # No Placement credentials from the environment: both names are
    # refused the same way.
    for key in [k for k in os.environ if k.startswith('OS_')]:
        monkeypatch.delenv(key)
    conf = tmp_path / 'nova.conf'
    conf.write_text('[cyborg_nova]\nsysfs_root = %s\nstate_path = %s\n'
                    % (host_tree('gpu-host'), tmp_path / 'state.sqlite'))
    # Created now: the first command to open it would say so on stderr.
    state_store.StateStore(str(tmp_path / 'state.sqlite'))
    args = RENAMED_RUNS[new]
    rc, out, err = cli(new, *args, config=str(conf))
    assert 'deprecated' not in err and 'Traceback' not in err
    assert (rc, out) != (0, '') or new == 'whitelist-show', err
    assert cli(*old.split(), *args, config=str(conf)) == (
        rc, out, '"%s" is deprecated, use "%s"\n%s' % (old, new, err))


def test_help_lists_new_names_not_old_ones():
    rc, out, _ = cli('--help')
    assert rc == 0
    listed = {line.split()[0] for line in out.split('Commands:')[1]
              .splitlines() if line.startswith('  ')}
    assert set(deprecated.RENAMED.values()) <= listed
    assert not listed & {'install-driver', 'uninstall-driver',
                         'update-driver', 'attach-instance',
                         'detach-instance', 'whitelist'}
