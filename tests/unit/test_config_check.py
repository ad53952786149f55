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

"""What the config check finds in real files, over fake sysfs trees."""

import configparser
from importlib import metadata
import logging
import os
import sqlite3

from oslo_config import cfg
import pytest

from cyborg_drivers import loader
from cyborg_nova.cmd import status
from cyborg_nova import conf as cn_conf
from cyborg_nova import config_check
from cyborg_nova.store import migrations

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
ERROR, WARNING = config_check.ERROR, config_check.WARNING


def load(path, *more):
    """A ConfigOpts as the commands make it: [cyborg_nova] registered."""
    conf = cfg.ConfigOpts()
    cn_conf.register_opts(conf)
    conf([], project='cyborg-nova', default_config_files=[str(path)] + [
        str(p) for p in more])
    return conf


def findings(tmp_path, text, **kwargs):
    path = tmp_path / 'nova.conf'
    path.write_text(text)
    return [(f.severity, f.where, f.message)
            for f in config_check.check(load(path), **kwargs)]


@pytest.fixture(scope='module')
def gpu_root(tmp_path_factory):
    from cyborg_drivers.fake import hosttree
    root = str(tmp_path_factory.mktemp('gpu') / 'sys')
    hosttree.build_tree(hosttree.profile_path('gpu-host'), root)
    return root


@pytest.fixture(scope='module')
def nic_root(tmp_path_factory):
    from cyborg_drivers.fake import hosttree
    root = str(tmp_path_factory.mktemp('nic') / 'sys')
    hosttree.build_tree(hosttree.profile_path('crypto-nic-host'), root)
    return root


def gpu_only(root, more=''):
    return ('[cyborg_nova]\nenabled_drivers = nvidia_gpu\nsysfs_root = %s\n'
            % root + more)


def test_a_clean_config_has_no_finding(tmp_path, gpu_root):
    assert findings(tmp_path, '[DEFAULT]\ndebug = true\n' + gpu_only(
        gpu_root, '[cyborg_nvidia_gpu]\nenabled_vgpu_types = nvidia-222\n')
    ) == []


def test_misspelt_option_names_the_nearest(tmp_path, gpu_root):
    found = findings(tmp_path, gpu_only(gpu_root, 'enabled_driver = '
                                        'nic_sriov\n'))
    assert found == [(ERROR, '[cyborg_nova] enabled_driver',
                      'unknown option (in %s), ignored; did you mean '
                      'enabled_drivers?' % (tmp_path / 'nova.conf'))]


def test_misspelt_group_names_the_nearest(tmp_path, gpu_root):
    found = findings(tmp_path, gpu_only(gpu_root) + '[cyborg-nova]\n'
                     'enabled_drivers = nic_sriov\n')
    assert found == [(ERROR, '[cyborg-nova]',
                      'unknown group (in %s), its options are ignored; did '
                      'you mean [cyborg_nova]?' % (tmp_path / 'nova.conf'))]


def test_unknown_option_of_a_driver_group(tmp_path, gpu_root):
    found = findings(tmp_path, gpu_only(gpu_root) + '[cyborg_nvidia_gpu]\n'
                     'foo = 1\n')
    assert (ERROR, '[cyborg_nvidia_gpu] foo',
            'unknown option (in %s), ignored; the group has: '
            'enabled_vgpu_types, vfio_vgpu_types'
            % (tmp_path / 'nova.conf')) in found


def test_unknown_option_of_the_nic_group(tmp_path, nic_root):
    found = findings(tmp_path, '[cyborg_nova]\nenabled_drivers = nic_sriov\n'
                     'sysfs_root = %s\n[cyborg_nic_sriov]\nfoo = 1\n'
                     'physical_device_mappings = physnet1:ens1f0\n'
                     % nic_root)
    assert found == [(ERROR, '[cyborg_nic_sriov] foo',
                      'unknown option (in %s), ignored; the group has: '
                      'function_device_mappings, physical_device_mappings'
                      % (tmp_path / 'nova.conf'))]


def test_group_of_a_driver_without_options(tmp_path, gpu_root):
    found = findings(tmp_path, gpu_only(gpu_root) + '[cyborg_intel_qat]\n'
                     'x = 1\n')
    assert found == [(ERROR, '[cyborg_intel_qat]',
                      'unknown group (in %s), its options are ignored; '
                      'driver intel_qat takes no options'
                      % (tmp_path / 'nova.conf'))]


@pytest.mark.parametrize('line, message', [
    ('program_timeout = abc', "invalid value 'abc' (in {path}): invalid "
                              "literal for int() with base 10: 'abc'"),
    ('auto_ready = maybe', "invalid value 'maybe' (in {path}): Unexpected "
                           "boolean value 'maybe'"),
    ('program_concurrency = 0', "invalid value '0' (in {path}): Should be "
                                "greater than or equal to 1"),
])
def test_values_that_do_not_parse(tmp_path, gpu_root, line, message):
    option = line.split()[0]
    found = findings(tmp_path, gpu_only(gpu_root, line + '\n'))
    assert found == [(ERROR, '[cyborg_nova] %s' % option, message.format(
        path=tmp_path / 'nova.conf'))]


def test_bad_value_in_an_agent_group(tmp_path, gpu_root):
    found = findings(tmp_path, gpu_only(gpu_root) + '[cyborg_agent]\n'
                     'heartbeat_interval = often\n')
    assert [w for _, w, _ in found] == ['[cyborg_agent] heartbeat_interval']


def test_vgpu_type_that_is_no_mdev_type(tmp_path, gpu_root):
    found = findings(tmp_path, gpu_only(
        gpu_root, '[cyborg_nvidia_gpu]\nenabled_vgpu_types = nosuch\n'))
    assert found == [(ERROR, '[cyborg_nvidia_gpu] enabled_vgpu_types',
                      "'nosuch' is not an NVIDIA mdev type (nvidia-<number>, "
                      "e.g. nvidia-222: a directory name under a GPU's "
                      "mdev_supported_types)")]


def test_vgpu_type_no_device_offers(tmp_path, gpu_root):
    found = findings(tmp_path, gpu_only(
        gpu_root, '[cyborg_nvidia_gpu]\nenabled_vgpu_types = nvidia-999\n'))
    assert found == [(WARNING, '[cyborg_nvidia_gpu] enabled_vgpu_types',
                      'nvidia-999 is offered by no device under %s '
                      '(offered: nvidia-222, nvidia-223)' % gpu_root)]


def test_malformed_vfio_vgpu_types(tmp_path, gpu_root):
    found = findings(tmp_path, gpu_only(
        gpu_root, '[cyborg_nvidia_gpu]\nvfio_vgpu_types = 1414\n'))
    assert [(s, w) for s, w, _ in found] == [
        (ERROR, '[cyborg_nvidia_gpu] vfio_vgpu_types')]


def test_empty_sysfs_root(tmp_path):
    found = findings(tmp_path, '[cyborg_nova]\nsysfs_root =\n')
    assert found == [(ERROR, '[cyborg_nova] sysfs_root',
                      'empty: discovery would read bus/pci relative to the '
                      'current directory; leave it unset for /sys')]


def test_sysfs_root_without_a_pci_bus(tmp_path):
    found = findings(tmp_path, '[cyborg_nova]\nsysfs_root = %s\n' % tmp_path)
    assert [(s, w) for s, w, _ in found] == [
        (ERROR, '[cyborg_nova] sysfs_root')]
    assert found[0][2].startswith('%s is not a sysfs tree with a PCI bus'
                                  % tmp_path)


def test_sysfs_root_argument_wins(tmp_path, gpu_root):
    found = findings(tmp_path, '[cyborg_nova]\nsysfs_root =\n'
                     'enabled_drivers = nvidia_gpu\n', sysfs_root=gpu_root)
    assert found == []


@pytest.mark.parametrize('mapping', ['ens1f0', 'physnet1:', ':ens1f0'])
def test_malformed_nic_mapping(tmp_path, nic_root, mapping):
    found = findings(tmp_path, '[cyborg_nova]\nenabled_drivers = nic_sriov\n'
                     'sysfs_root = %s\n[cyborg_nic_sriov]\n'
                     'physical_device_mappings = %s\n' % (nic_root, mapping))
    assert [(s, w) for s, w, _ in found] == [
        (ERROR, '[cyborg_nic_sriov] physical_device_mappings')]
    # The driver's own message, without the group and option it names.
    assert found[0][2].startswith('%r is not <name>:<device>' % mapping)


def test_nic_mapping_naming_no_pf_says_why(tmp_path, nic_root):
    found = findings(tmp_path, '[cyborg_nova]\nenabled_drivers = nic_sriov\n'
                     'sysfs_root = %s\n[cyborg_nic_sriov]\n'
                     'physical_device_mappings = physnet1:ens9\n' % nic_root)
    assert found[:1] == [
        (WARNING, '[cyborg_nova] enabled_drivers',
         'driver nic_sriov found no device under %s' % nic_root)]
    # Why, in the driver's words.
    ((severity, where, message),) = found[1:]
    assert (severity, where) == (WARNING, '')
    assert message.startswith('discovery leaves ens9 out: named in '
                              '[cyborg_nic_sriov] physical_device_mappings '
                              'but no Intel or Mellanox NIC PF')


def test_nic_function_of_an_unmapped_pf(tmp_path, nic_root):
    found = findings(tmp_path, '[cyborg_nova]\nenabled_drivers = nic_sriov\n'
                     'sysfs_root = %s\n[cyborg_nic_sriov]\n'
                     'physical_device_mappings = physnet1:ens1f0\n'
                     'function_device_mappings = ipsec:ens2f0\n' % nic_root)
    assert found == [(WARNING, '[cyborg_nic_sriov] function_device_mappings',
                      'ipsec:ens2f0: ens2f0 is not in physical_device_mappings'
                      ', so it is not reported and the function is not '
                      'offered')]


def test_nic_driver_enabled_but_not_configured(tmp_path, nic_root):
    found = findings(tmp_path, '[cyborg_nova]\nenabled_drivers = nic_sriov\n'
                     'sysfs_root = %s\n' % nic_root)
    assert found == [(WARNING, '[cyborg_nic_sriov]',
                      'not configured: driver nic_sriov (enabled in '
                      '[cyborg_nova] enabled_drivers) reports nothing until '
                      'it is')]


def test_driver_group_set_but_driver_not_enabled(tmp_path, gpu_root):
    found = findings(tmp_path, gpu_only(gpu_root) + '[cyborg_nic_sriov]\n'
                     'physical_device_mappings = physnet1:ens1f0\n')
    assert found == [(WARNING, '[cyborg_nic_sriov]',
                      'set, but driver nic_sriov is not in [cyborg_nova] '
                      'enabled_drivers: these options have no effect '
                      '(unless nic_sriov is enabled on the host with '
                      '"cyborg-nova driver-install")')]


def test_drivers_not_installed(tmp_path, gpu_root):
    found = findings(tmp_path, '[cyborg_nova]\nsysfs_root = %s\n'
                     'enabled_drivers = nvidia_gpu,nvidia_gpus,,warp_drive\n'
                     % gpu_root)
    installed = ', '.join(loader.installed())
    assert found == [
        (ERROR, '[cyborg_nova] enabled_drivers',
         "driver 'nvidia_gpus' is not installed; did you mean nvidia_gpu? "
         "(installed: %s)" % installed),
        (ERROR, '[cyborg_nova] enabled_drivers',
         'an empty driver name (a stray comma?)'),
        (ERROR, '[cyborg_nova] enabled_drivers',
         "driver 'warp_drive' is not installed (installed: %s)" % installed)]


def test_enabled_drivers_with_no_device(tmp_path, gpu_root):
    # The default drivers on a GPU host: the FPGA and QAT ones find none.
    found = findings(tmp_path, '[cyborg_nova]\nsysfs_root = %s\n' % gpu_root)
    assert found == [
        (WARNING, '[cyborg_nova] enabled_drivers',
         'driver %s found no device under %s' % (name, gpu_root))
        for name in ('intel_fpga', 'xilinx_fpga', 'intel_qat')]


def test_bad_generic_spec(tmp_path, gpu_root):
    found = findings(tmp_path, '[cyborg_nova]\nenabled_drivers = generic\n'
                     'sysfs_root = %s\n[cyborg_generic]\n'
                     'device_spec = {"vendor": 1}\n' % gpu_root)
    assert [(s, w) for s, w, _ in found] == [(ERROR, '[cyborg_generic]')]
    assert found[0][2].startswith('driver generic refuses its options: '
                                  'device_spec')


def test_nova_groups_are_left_alone(tmp_path, gpu_root):
    # nova.conf as on a compute: none of these groups is ours, including
    # Nova's [cyborg] (its client of OpenStack Cyborg) and [conductor].
    found = findings(tmp_path, gpu_only(gpu_root) + (
        '[DEFAULT]\ncompute_driver = cyborg_nova.LibvirtDriver\n'
        '[libvirt]\nvirt_type = kvm\n[pci]\ndevice_spec = {}\n'
        '[devices]\nenabled_mdev_types = nvidia-35\n'
        '[mdev_nvidia-35]\ndevice_addresses = 0000:84:00.0\n'
        '[cyborg]\nvalid_interfaces = internal\n'
        '[conductor]\nworkers = 2\n[placement]\nauth_type = password\n'))
    assert found == []


def test_our_option_in_novas_cyborg_group(tmp_path, gpu_root):
    found = findings(tmp_path, gpu_only(gpu_root) + '[cyborg]\n'
                     'sysfs_root = /sys\n')
    assert found == [(ERROR, '[cyborg] sysfs_root',
                      "not an option of this group (in %s): [cyborg] is "
                      "Nova's, for the OpenStack Cyborg service; did you "
                      "mean [cyborg_nova] sysfs_root?"
                      % (tmp_path / 'nova.conf'))]


def test_group_names_are_case_insensitive(tmp_path, gpu_root):
    assert findings(tmp_path, gpu_only(gpu_root).replace(
        'cyborg_nova', 'Cyborg_Nova')) == []


def test_every_file_is_read(tmp_path, gpu_root):
    (tmp_path / 'nova.conf').write_text(gpu_only(gpu_root))
    second = tmp_path / 'agent.conf'
    second.write_text('[cyborg_agent]\nnodename = cn1\nnode_name = cn1\n')
    found = config_check.check(load(tmp_path / 'nova.conf', second))
    assert [(f.where, f.message) for f in found] == [
        ('[cyborg_agent] node_name', 'unknown option (in %s), ignored; did '
         'you mean nodename?' % second)]


def test_a_file_that_does_not_parse(tmp_path):
    path = tmp_path / 'nova.conf'
    path.write_text('[cyborg_nova]\nsysfs_root = /sys\n')
    conf = load(path)
    path.write_text('[cyborg_nova\nsysfs_root = /sys\n')
    (finding,) = config_check.check(conf)
    assert finding.severity == ERROR
    assert finding.message.startswith('cannot parse')


def test_the_callers_overrides_apply(tmp_path, gpu_root):
    # nova-compute checks Nova's CONF, whose values may be overridden (as
    # Nova's tests do): those are the values used, not the files'.
    path = tmp_path / 'nova.conf'
    path.write_text('[cyborg_nova]\nsysfs_root =\n')
    conf = load(path)
    conf.set_override('sysfs_root', gpu_root, 'cyborg_nova')
    conf.set_override('enabled_drivers', ['nvidia_gpu'], 'cyborg_nova')
    assert config_check.check(conf) == []


def test_drivers_in_effect_can_be_given(tmp_path, gpu_root):
    found = findings(tmp_path, '[cyborg_nova]\nsysfs_root = %s\n' % gpu_root,
                     drivers=['nvidia_gpu'])
    assert found == []


def test_no_files_checks_the_defaults(tmp_path):
    conf = cfg.ConfigOpts()
    cn_conf.register_opts(conf)
    conf([], default_config_files=[])
    conf.set_override('sysfs_root', str(tmp_path), 'cyborg_nova')
    found = config_check.check(conf)
    assert [(f.severity, f.where) for f in found] == [
        (ERROR, '[cyborg_nova] sysfs_root')]


def test_log_findings_logs_each_once_at_its_level(tmp_path, gpu_root,
                                                  caplog):
    path = tmp_path / 'nova.conf'
    path.write_text(gpu_only(gpu_root, 'enabled_driver = x\n')
                    + '[cyborg_nvidia_gpu]\nenabled_vgpu_types = nvidia-9\n')
    log = logging.getLogger('test.config_check')
    with caplog.at_level(logging.WARNING, logger='test.config_check'):
        found = config_check.log_findings(load(path), log)
    assert len(found) == 2
    assert [(r.levelno, r.getMessage()) for r in caplog.records
            if r.name == 'test.config_check'] == [
        (logging.ERROR, 'cyborg-nova config check: [cyborg_nova] '
         'enabled_driver: unknown option (in %s), ignored; did you mean '
         'enabled_drivers?' % path),
        (logging.WARNING, 'cyborg-nova config check: [cyborg_nvidia_gpu] '
         'enabled_vgpu_types: nvidia-9 is offered by no device under %s '
         '(offered: nvidia-222, nvidia-223)' % gpu_root)]


def test_log_findings_never_raises(caplog, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError('boom')
    monkeypatch.setattr(config_check, 'check', broken)
    log = logging.getLogger('test.config_check')
    with caplog.at_level(logging.WARNING, logger='test.config_check'):
        assert config_check.log_findings(cfg.ConfigOpts(), log) == []
    assert 'could not be checked' in caplog.text


def test_summary():
    finding = config_check.Finding(WARNING, 'cyborg_nova', 'x', 'y')
    assert config_check.summary([], ['a.conf']) == (
        'no problems found in a.conf')
    assert config_check.summary([finding], ['a.conf', 'b.conf']) == (
        '0 errors, 1 warning in a.conf, b.conf')
    assert str(finding) == 'warning: [cyborg_nova] x: y'


def test_every_group_of_the_sample_is_known():
    # Those of the oslo.config.opts entry point (the sample config and
    # oslo-config-validator's): the services' and every driver's.
    (entry_point,) = [ep for ep in metadata.entry_points(
        group='oslo.config.opts') if ep.name == 'cyborg_nova']
    groups = {getattr(g, 'name', g) for g, _ in entry_point.load()()}
    assert groups == set(config_check.known_options())
    assert {'cyborg_nova', 'cyborg_aer', 'cyborg_scrub', 'cyborg_agent',
            'cyborg_conductor', 'cyborg_nova_privsep', 'cyborg_nic_sriov',
            'cyborg_nvidia_gpu', 'cyborg_generic', 'cyborg_fake'} <= groups


# -- cyborg-nova-status ------------------------------------------------------

def _store(path, version):
    db = sqlite3.connect(str(path))
    db.execute('CREATE TABLE t (x)')
    db.execute('PRAGMA user_version = %d' % version)
    db.commit()
    db.close()


def test_store_missing_is_not_created(tmp_path):
    path = tmp_path / 'state' / 'state.sqlite'
    result = status.check_store(str(path))
    assert result.code == status.Code.SUCCESS
    assert 'No state store at %s yet' % path in result.details
    assert not (tmp_path / 'state').exists()


def test_store_current_older_newer(tmp_path):
    path = tmp_path / 'state.sqlite'
    _store(path, migrations.LATEST)
    result = status.check_store(str(path))
    assert (result.code, result.details) == (
        status.Code.SUCCESS, 'The state store %s has schema version %d, the '
        'current one.' % (path, migrations.LATEST))
    _store_version(path, migrations.LATEST - 1)
    result = status.check_store(str(path))
    assert result.code == status.Code.SUCCESS
    assert ('has schema version %d, older than the %d' % (
        migrations.LATEST - 1, migrations.LATEST)) in result.details
    assert 'nova-compute' in result.details
    assert _version(path) == migrations.LATEST - 1
    _store_version(path, migrations.LATEST + 1)
    result = status.check_store(str(path))
    assert result.code == status.Code.FAILURE
    assert 'newer than the %d this cyborg-nova knows' % (
        migrations.LATEST) in result.details
    # Read, never migrated.
    assert _version(path) == migrations.LATEST + 1


def _store_version(path, version):
    db = sqlite3.connect(str(path))
    db.execute('PRAGMA user_version = %d' % version)
    db.commit()
    db.close()


def _version(path):
    db = sqlite3.connect(str(path))
    try:
        return db.execute('PRAGMA user_version').fetchone()[0]
    finally:
        db.close()


def test_store_that_is_no_database(tmp_path):
    path = tmp_path / 'state.sqlite'
    path.write_bytes(b'not a database, not at all' * 40)
    result = status.check_store(str(path))
    assert result.code == status.Code.FAILURE
    assert 'cannot be read' in result.details


def test_nova_not_installed_is_a_warning(monkeypatch):
    def missing(name):
        raise metadata.PackageNotFoundError(name)
    monkeypatch.setattr(status.metadata, 'version', missing)
    result = status.check_nova()
    assert result.code == status.Code.WARNING
    assert 'this check is for compute nodes' in result.details


@pytest.mark.parametrize('version, code', [
    ('31.0.0', 'SUCCESS'), ('34.1.0', 'SUCCESS'), ('30.2.0', 'FAILURE'),
    ('35.0.0.0b1', 'FAILURE')])
def test_nova_release_range(monkeypatch, version, code):
    monkeypatch.setattr(status.metadata, 'version', lambda name: version)
    assert status.check_nova().code == getattr(status.Code, code)


def test_nova_range_is_the_extras():
    parser = configparser.ConfigParser()
    parser.read(os.path.join(TOP, 'setup.cfg'))
    assert parser['extras']['nova'].split() == [
        'nova>=%d.0.0,<%d' % (status.NOVA_MIN, status.NOVA_BELOW)]


@pytest.mark.parametrize('argv, expected', [
    (['upgrade', 'check', '--config-file', 'a', '--json'],
     ['--config-file', 'a', 'upgrade', 'check', '--json']),
    (['upgrade', 'check', '--config-dir=d'],
     ['--config-dir=d', 'upgrade', 'check']),
    (['--config-file', 'a', 'upgrade', 'check'],
     ['--config-file', 'a', 'upgrade', 'check']),
])
def test_config_options_go_first(argv, expected):
    assert status.options_first(argv) == expected


@pytest.mark.parametrize('name', ['../dma.gbs', '/srv/dma.gbs',
                                  'intel//dma.gbs'])
def test_a_default_bitstream_the_daemon_would_refuse(tmp_path, name):
    from cyborg_drivers.fake import hosttree
    root = str(tmp_path / 'sys')
    hosttree.build_tree(hosttree.profile_path('fpga-host'), root)
    text = ('[cyborg_nova]\nenabled_drivers = intel_fpga\nsysfs_root = %s\n'
            '[cyborg_intel_fpga]\nscrub_bitstream = %s\n' % (root, name))
    found = findings(tmp_path, text)
    assert [(s, w) for s, w, _ in found] == [
        (ERROR, '[cyborg_intel_fpga] scrub_bitstream')]
    assert found[0][2].endswith(
        'every scrub of a whole card would fail and fence it')
    # A name under the daemon's directory is no finding.
    assert findings(tmp_path, text.replace(name, 'intel/dma.gbs')) == []
