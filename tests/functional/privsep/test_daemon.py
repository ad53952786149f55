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

"""The privileged entrypoints through real privsep daemons.

Each test starts the daemons with the virtualenv's ``privsep-helper``
(as a deployment does, minus sudo) and a config file whose
``[cyborg_nova_privsep]`` names a fake sysfs tree and a drop-in in a
temporary directory; the test process's own configuration says nothing
about either, so every write proves the daemon used its own settings.
"""

import logging
import os
import stat
import sys
import uuid

from oslo_config import cfg
from oslo_config import fixture as cfg_fixture
from oslo_privsep import capabilities
from oslo_privsep import priv_context
from oslo_privsep.test import fixture as privsep_fixture
import pytest

from cyborg_nova.conf import privsep as privsep_conf
import privsep
import privsep.mdev
import privsep.nova_conf
import privsep.pci
import privsep.qat
from tests.unit.privsep import fakesysfs

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
HELPER = os.path.join(os.path.dirname(sys.executable), 'privsep-helper')
T4 = '0000:3c:00.0'
T4_VGPU = '0000:3b:00.0'
A100 = '0000:5f:00.0'
NVME = '0000:18:00.0'
CONTEXTS = (privsep.sysfs_admin, privsep.nova_config)
QAT_UP = '0000:6b:00.0'      # qat-gen4-host: a 4xxx that is up
QAT_DOWN = '0000:f7:00.0'    # qat-gen4-host: a 6xxx that is down


@pytest.fixture
def host(tmp_path):
    """A fake host and daemons configured for it; the daemons' config."""
    yield from daemons_for(tmp_path, fakesysfs.GPU_HOST)


@pytest.fixture
def qat_host(tmp_path):
    """As ``host``, for the qat-gen4-host profile."""
    yield from daemons_for(tmp_path, 'qat-gen4-host')


def daemons_for(tmp_path, profile):
    root = fakesysfs.build(str(tmp_path / 'sys'), profile)
    conf_d = tmp_path / 'nova.conf.d'
    conf_d.mkdir()
    conf = tmp_path / 'privsep.conf'
    tool = fakesysfs.sriov_manage(tmp_path, root)
    text = ('[cyborg_nova_privsep]\nsysfs_root = %s\n'
            'pci_device_spec_file = %s\nnvidia_sriov_manage = %s\n'
            % (root, conf_d / '60-cyborg-nova-pci.conf', tool))
    if os.geteuid() != 0:
        # Without root there are no capabilities to keep; the fake tree
        # and the temporary directory are the test user's anyway.
        for context in CONTEXTS:
            text += '[%s]\ncapabilities =\n' % context.cfg_section
    conf.write_text(text)
    fixture = cfg_fixture.Config(cfg.CONF)
    fixture.setUp()
    for context in CONTEXTS:
        assert context.channel is None
        # The daemon must import ``privsep`` from this tree.
        fixture.config(
            helper_command='env PYTHONPATH=%s %s --config-file %s'
            % (TOP, HELPER, conf), group=context.cfg_section)

    class Host:
        sysfs_root = root
        drop_in = str(conf_d / '60-cyborg-nova-pci.conf')
        sriov_manage = tool

    yield Host
    for context in CONTEXTS:
        context.stop()
    fixture.cleanUp()


def test_pci_through_the_daemon(host):
    assert privsep.pci.bind_vfio(T4) == 'nvidia'   # no kernel to rebind
    assert fakesysfs.read(fakesysfs.device(
        host.sysfs_root, T4, 'driver_override')) == 'vfio-pci'
    assert fakesysfs.read(os.path.join(
        host.sysfs_root, 'bus', 'pci', 'drivers_probe')) == T4
    # An NVIDIA GPU's VFs: all of them, through NVIDIA's script, which
    # the daemon's own config names.
    assert privsep.pci.set_num_vfs(A100, 16) == 16
    assert fakesysfs.calls(host.sriov_manage) == ['-e %s' % A100]
    assert fakesysfs.read(fakesysfs.device(
        host.sysfs_root, A100, 'sriov_numvfs')).strip() == '16'
    with pytest.raises(privsep.OutOfRange, match='all of its 16 VFs'):
        privsep.pci.set_num_vfs(A100, 8)
    assert privsep.pci.unbind(T4) == 'nvidia'
    assert fakesysfs.read(fakesysfs.device(
        host.sysfs_root, T4, 'driver_override')) == '\n'
    # A scrub's function reset, by address only.
    assert privsep.pci.reset_function(T4) == 'flr'
    assert fakesysfs.read(fakesysfs.device(
        host.sysfs_root, T4, 'reset')) == '1'


def test_mdev_through_the_daemon(host):
    mdev_uuid = str(uuid.uuid4())
    assert privsep.mdev.create(T4_VGPU, 'nvidia-223', mdev_uuid) == mdev_uuid
    assert fakesysfs.read(fakesysfs.device(
        host.sysfs_root, T4_VGPU, 'mdev_supported_types', 'nvidia-223',
        'create')) == mdev_uuid
    path = fakesysfs.add_mdev(host.sysfs_root, T4_VGPU, mdev_uuid)
    privsep.mdev.remove(T4_VGPU, mdev_uuid)
    assert fakesysfs.read(os.path.join(path, 'remove')) == '1'


@pytest.mark.parametrize('call, args, error', [
    (privsep.pci.bind_vfio, ('../../../etc',), privsep.PathLikeArgument),
    (privsep.pci.bind_vfio, ('0000:3C:00.0',), privsep.NotAPciAddress),
    (privsep.pci.unbind, ('0000:ff:00.0',), privsep.NoSuchDevice),
    (privsep.pci.unbind, ('0000:3a:00.0',), privsep.InvalidArgument),
    (privsep.pci.set_num_vfs, (A100, 17), privsep.OutOfRange),
    (privsep.pci.set_num_vfs, (A100, -1), privsep.OutOfRange),
    (privsep.pci.set_num_vfs, (A100, True), privsep.InvalidArgument),
    (privsep.pci.set_num_vfs, (T4, 1), privsep.UnknownAttribute),
    (privsep.mdev.create, (T4_VGPU, 'nvidia-999', str(uuid.uuid4())),
     privsep.UnknownAttribute),
    (privsep.mdev.create, (T4_VGPU, '../nvidia-222', str(uuid.uuid4())),
     privsep.PathLikeArgument),
    (privsep.mdev.create, (T4_VGPU, 'nvidia-222', 'NOT-A-UUID'),
     privsep.InvalidArgument),
    (privsep.mdev.remove, (T4_VGPU, str(uuid.uuid4())),
     privsep.NoSuchDevice),
    (privsep.nova_conf.write_device_spec, ([{'address': '*:18:00.*'}],),
     privsep.NotAPciAddress),
    (privsep.nova_conf.write_device_spec,
     ([{'address': NVME, 'devname': 'eth0'}],), privsep.UnknownAttribute),
])
def test_bad_arguments_refused_before_the_daemon_writes(host, call, args,
                                                        error):
    before = fakesysfs.snapshot(host.sysfs_root)
    with pytest.raises(error) as info:
        call(*args)
    # Re-raised in this process with the daemon's message.
    assert str(info.value)
    assert fakesysfs.snapshot(host.sysfs_root) == before
    assert not os.path.exists(host.drop_in)


def test_qat_services_through_the_daemon(qat_host):
    root = qat_host.sysfs_root
    assert privsep.qat.set_services(QAT_DOWN, 'dc;sym') == 'sym;dc'
    assert fakesysfs.read(fakesysfs.device(
        root, QAT_DOWN, 'qat', 'cfg_services')) == 'sym;dc'


@pytest.mark.parametrize('address, services, error', [
    (QAT_UP, 'dc', privsep.NotPossible),
    (QAT_DOWN, 'sym;asym;dc;decomp', privsep.InvalidArgument),
    (QAT_DOWN, '../state', privsep.PathLikeArgument),
    ('0000:3d:00.0', 'sym', privsep.InvalidArgument),    # a C62x
    ('0000:18:00.0', 'sym', privsep.InvalidArgument),    # an NVMe disk
    ('0000:f7:00.0/qat', 'sym', privsep.PathLikeArgument),
])
def test_qat_bad_arguments_refused_by_the_daemon(qat_host, address,
                                                 services, error):
    before = fakesysfs.snapshot(qat_host.sysfs_root)
    with pytest.raises(error) as info:
        privsep.qat.set_services(address, services)
    # Re-raised in this process with the daemon's message.
    assert address in str(info.value) or repr(services) in str(info.value)
    assert fakesysfs.snapshot(qat_host.sysfs_root) == before


def test_the_caller_cannot_choose_the_root(host):
    # The client's own config says /sys (the default): the daemon still
    # wrote the fake tree above; and there is no argument to pass one.
    privsep_conf.register_opts(cfg.CONF)
    assert cfg.CONF.cyborg_nova_privsep.sysfs_root == '/sys'
    with pytest.raises(TypeError):
        privsep.pci.set_num_vfs(A100, 1, sysfs_root='/')
    assert fakesysfs.read(fakesysfs.device(
        host.sysfs_root, A100, 'sriov_numvfs')) == '4\n'


def test_drop_in_through_the_daemon(host):
    result = privsep.nova_conf.write_device_spec([
        {'address': NVME, 'vendor_id': '144d', 'product_id': 'a808',
         'resource_class': 'CUSTOM_NVME', 'traits': ['CUSTOM_FAST']}])
    assert result == {'path': host.drop_in, 'changed': True, 'entries': 1}
    assert stat.S_IMODE(os.stat(host.drop_in).st_mode) == 0o640
    nova_pci_conf = pytest.importorskip('nova.conf.pci')
    from nova.pci import whitelist
    conf = cfg.ConfigOpts()
    nova_pci_conf.register_opts(conf)
    conf([], project='nova', default_config_files=[host.drop_in],
         default_config_dirs=[])
    (spec,) = whitelist.Whitelist(conf.pci.device_spec).specs
    assert spec.match({'vendor_id': '144d', 'product_id': 'a808',
                       'address': NVME, 'parent_addr': None})
    assert spec.get_tags() == {'resource_class': 'CUSTOM_NVME',
                               'traits': 'CUSTOM_FAST'}


@pytest.mark.skipif(os.geteuid() != 0, reason='capabilities need root')
def test_daemons_keep_only_the_documented_capabilities(host, caplog):
    caplog.set_level(logging.INFO)
    privsep.pci.set_num_vfs(A100, 4)
    privsep.nova_conf.write_device_spec([])
    text = caplog.text
    # eff/prm/inh, as the daemons log them after dropping privileges.
    assert 'CAP_DAC_OVERRIDE/CAP_DAC_OVERRIDE/none' in text
    assert ('CAP_CHOWN|CAP_DAC_OVERRIDE|CAP_FOWNER/'
            'CAP_CHOWN|CAP_DAC_OVERRIDE|CAP_FOWNER/none') in text
    assert capabilities.CAPS_BYVALUE[capabilities.CAP_SYS_ADMIN] \
        not in text


def test_daemon_without_any_capability(tmp_path):
    """oslo.privsep's own fixture: a forked daemon with no capabilities."""
    root = fakesysfs.build(str(tmp_path / 'sys'))
    privsep_conf.register_opts(cfg.CONF)
    conf = cfg_fixture.Config(cfg.CONF)
    conf.setUp()
    try:
        # Forked: the daemon inherits this process's configuration.
        tool = fakesysfs.sriov_manage(tmp_path, root)
        conf.config(sysfs_root=root, nvidia_sriov_manage=tool,
                    group=privsep_conf.GROUP.name)
        fixture = privsep_fixture.UnprivilegedPrivsepFixture(
            privsep.sysfs_admin, {})
        fixture.setUp()
        try:
            assert privsep.sysfs_admin.channel is not None
            assert privsep.pci.set_num_vfs(A100, 0) == 0
            with pytest.raises(privsep.NoSuchDevice):
                privsep.pci.bind_vfio('0000:ff:00.0')
        finally:
            fixture.cleanUp()
    finally:
        conf.cleanUp()
    assert fakesysfs.read(fakesysfs.device(
        root, A100, 'sriov_numvfs')).strip() == '0'
    assert fakesysfs.calls(tool) == ['-d %s' % A100]
    assert privsep.sysfs_admin.channel is None
    assert isinstance(privsep.sysfs_admin, priv_context.PrivContext)
