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

"""Nova's [pci] device_spec kept consistent with cyborg-nova.

The module's functions in-process, then ``cyborg-nova whitelist-show`` and
``sync`` as an operator runs them, with the drop-in written by a real
privsep daemon. Nova's own option definitions and parser decide what a
device_spec entry matches, here as in nova-compute.
"""

import json
import os
import subprocess
import sys

from oslo_config import cfg
import pytest

from cyborg_nova.cmd import cli
from cyborg_nova.cmd import whitelist as whitelist_cmd
from cyborg_nova import whitelist

pytest.importorskip('nova.pci.whitelist')
# Nova's parser, as the whitelist commands pass it in.
NOVA = whitelist_cmd.nova_parser()

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
HELPER = os.path.join(os.path.dirname(sys.executable), 'privsep-helper')
# The commands are added here too, so the tests do not depend on the
# installed entry points being up to date.
RUNNER = """
import sys
from cyborg_nova.cmd import cli
from cyborg_nova.cmd import whitelist
app = cli.CyborgNovaApp()
app.command_manager.add_command('whitelist-show', whitelist.WhitelistShow)
app.command_manager.add_command('whitelist-sync', whitelist.WhitelistSync)
sys.exit(app.run(sys.argv[1:]))
"""
A10 = '0000:af:00.0'        # 10de:2236, an nvidia_gpu accelerator
NVME = '0000:18:00.0'       # 144d:a808, not an accelerator
QAT = '0000:6b:00.0'        # 8086:4940 with 16 VFs 8086:4941


@pytest.fixture
def host(tmp_path, host_tree):
    """A host profile, its nova.conf, and a way to run the command."""

    class Host:
        def __init__(self, profile='gpu-host', drivers='nvidia_gpu'):
            self.root = host_tree(profile)
            self.conf_d = tmp_path / 'nova.conf.d'
            self.conf_d.mkdir(exist_ok=True)
            self.drop_in = str(self.conf_d / '60-cyborg-nova-pci.conf')
            self.nova_conf = tmp_path / 'nova.conf'
            self.drivers = drivers
            self.write_conf()

        def write_conf(self, pci=''):
            text = (
                '[cyborg_nova]\nsysfs_root = %(root)s\n'
                'state_path = %(tmp)s/state.sqlite\n'
                'enabled_drivers = %(drivers)s\n'
                '[cyborg_nova_privsep]\nsysfs_root = %(root)s\n'
                'pci_device_spec_file = %(drop_in)s\n'
                '[cyborg_nova_privsep_nova_config]\n'
                'helper_command = env PYTHONPATH=%(top)s %(helper)s '
                '--config-file %(conf)s\n'
                % {'root': self.root, 'tmp': tmp_path, 'top': TOP,
                   'drivers': self.drivers, 'drop_in': self.drop_in,
                   'helper': HELPER, 'conf': self.nova_conf})
            if os.geteuid() != 0:
                text += 'capabilities =\n'
            if pci:
                text += '[pci]\n' + pci
            self.nova_conf.write_text(text)

        def conf(self):
            return cli.load_config([str(self.nova_conf)])

        def cli(self, *args):
            env = dict(os.environ, PYTHONPATH=TOP)
            proc = subprocess.run(
                [sys.executable, '-c', RUNNER, '--config-file',
                 str(self.nova_conf)] + list(args),
                capture_output=True, text=True, cwd=TOP, env=env,
                timeout=120)
            return proc.returncode, proc.stdout, proc.stderr

    return Host


def nova_reads(path):
    """device_spec of ``path`` as nova-compute parses it."""
    from nova.conf import pci as nova_pci_conf
    from nova.pci import whitelist as nova_whitelist
    conf = cfg.ConfigOpts()
    nova_pci_conf.register_opts(conf)
    conf([], project='nova', default_config_files=[path],
         default_config_dirs=[])
    return nova_whitelist.Whitelist(conf.pci.device_spec).specs


# -- the module ------------------------------------------------------------

def test_entries_read_with_nova_option_names(host):
    h = host()
    h.write_conf('passthrough_whitelist = {"address": "%s"}\n'
                 'device_spec = [{"vendor_id": "10de", "product_id": '
                 '"2236"}, {"address": "*:d8:00.*"}]\n' % NVME)
    entries = whitelist.read_device_spec(NOVA, [str(h.nova_conf), h.drop_in])
    # oslo.config gives both names' values, as it does to Nova.
    assert [e.spec for e in entries] == [
        {'address': NVME}, {'vendor_id': '10de', 'product_id': '2236'},
        {'address': '*:d8:00.*'}]
    assert {e.source for e in entries} == {str(h.nova_conf)}
    h.write_conf('passthrough_whitelist = {"address": "%s"}\n' % NVME)
    (entry,) = whitelist.read_device_spec(NOVA, [str(h.nova_conf)])
    assert entry.spec == {'address': NVME}


def test_entry_nova_rejects_names_the_file(host):
    h = host()
    h.write_conf('device_spec = {"address": "0000:18:00.0", '
                 '"vendor_id": "xyz1"}\n')
    with pytest.raises(whitelist.WhitelistError) as info:
        whitelist.read_device_spec(NOVA, [str(h.nova_conf)])
    assert str(h.nova_conf) in str(info.value)
    assert 'xyz1' in str(info.value)


def test_refuses_a_device_nova_already_claims(host):
    h = host()
    h.write_conf('device_spec = {"vendor_id": "10de", '
                 '"product_id": "2236"}\n')
    conf = h.conf()
    managed, errors = whitelist.managed_functions(conf, h.root,
                                                  ['nvidia_gpu'])
    assert errors == {}
    entries = whitelist.read_device_spec(NOVA, [str(h.nova_conf)])
    with pytest.raises(whitelist.WhitelistError) as info:
        whitelist.check(entries, managed)
    message = str(info.value)
    assert ('{"product_id": "2236", "vendor_id": "10de"} (in %s)'
            % h.nova_conf) in message
    assert '%s (accelerator of driver nvidia_gpu)' % A10 in message
    assert '1 more conflict' in message     # the other A10, 0000:d8:00.0


def test_units_are_managed_too(host):
    # QAT VFs are units of their PF's accelerator: Nova must not take one.
    h = host('crypto-nic-host', 'intel_qat')
    h.write_conf('device_spec = {"vendor_id": "8086", '
                 '"product_id": "4941", "address": "0000:6b:00.*"}\n')
    conf = h.conf()
    managed, _ = whitelist.managed_functions(conf, h.root, ['intel_qat'])
    found = whitelist.conflicts(
        whitelist.read_device_spec(NOVA, [str(h.nova_conf)]), managed)
    assert len(found) == 7       # VFs at 0000:6b:00.1 to 0000:6b:00.7
    assert found[0].function.describe() == (
        '0000:6b:00.1 (part of accelerator %s, driver intel_qat)' % QAT)
    assert found[0].function.parent_addr == QAT


@pytest.mark.parametrize('value, entry', [
    (NVME, {'address': NVME}),
    (NVME + ':CUSTOM_NVME', {'address': NVME,
                             'resource_class': 'CUSTOM_NVME'}),
    (NVME + ':nvme-disk:fast,HW_GPU_API_VULKAN',
     {'address': NVME, 'resource_class': 'CUSTOM_NVME_DISK',
      'traits': ['CUSTOM_FAST', 'HW_GPU_API_VULKAN']}),
    (NVME + '::CUSTOM_X', {'address': NVME, 'traits': ['CUSTOM_X']}),
])
def test_passthrough_forms(value, entry):
    assert whitelist.parse_passthrough(value) == entry


@pytest.mark.parametrize('value', [
    '18:00.0', '0000:18:00', '*:18:00.0', '0000:18:00.0:A:B:C',
    '../0000:18:00.0', ''])
def test_bad_passthrough(value):
    with pytest.raises(whitelist.WhitelistError, match='ADDRESS'):
        whitelist.parse_passthrough(value)


def test_plan_renders_a_drop_in_nova_accepts(host, tmp_path):
    h = host()
    plan = whitelist.plan_sync(NOVA, h.conf(), h.root, ['nvidia_gpu'],
                               [NVME + ':CUSTOM_NVME:HW_NVME_FAST'])
    assert plan.entries == [{'address': NVME, 'vendor_id': '144d',
                             'product_id': 'a808',
                             'resource_class': 'CUSTOM_NVME',
                             'traits': ['CUSTOM_HW_NVME_FAST']}]
    path = tmp_path / 'rendered.conf'
    path.write_text(plan.content)
    (spec,) = nova_reads(str(path))
    assert spec.match({'vendor_id': '144d', 'product_id': 'a808',
                       'address': NVME, 'parent_addr': None})
    assert plan.warnings == []


def test_plan_refuses_managed_unknown_and_repeated_devices(host):
    h = host()
    conf = h.conf()
    for values, message in [
            ([A10], 'is managed by cyborg-nova'),
            (['0000:19:00.0'], 'no PCI device 0000:19:00.0'),
            ([NVME, NVME + ':CUSTOM_X'], 'given twice')]:
        with pytest.raises(whitelist.WhitelistError, match=message):
            whitelist.plan_sync(NOVA, conf, h.root, ['nvidia_gpu'], values)


def test_plan_warns_when_another_entry_matches_first(host):
    h = host()
    h.write_conf('device_spec = {"address": "%s"}\n' % NVME)
    plan = whitelist.plan_sync(NOVA, h.conf(), h.root, ['nvidia_gpu'],
                               [NVME + ':CUSTOM_NVME'])
    assert len(plan.warnings) == 1 and str(h.nova_conf) in plan.warnings[0]


# -- the command ---------------------------------------------------------

def test_show_lists_entries_matches_and_conflicts(host):
    h = host()
    h.write_conf('device_spec = {"vendor_id": "10de", '
                 '"product_id": "2236"}\n'
                 'device_spec = {"address": "%s"}\n' % NVME)
    rc, out, err = h.cli('whitelist-show', '-f', 'json')
    assert rc == 0, err
    rows = json.loads(out)
    assert [(r['source'], r['matches'], r['conflicts']) for r in rows] == [
        (str(h.nova_conf), [A10, '0000:d8:00.0'], [A10, '0000:d8:00.0']),
        (str(h.nova_conf), [NVME], [])]
    assert err.count('conflict: ') == 2 and 'Traceback' not in err


def test_sync_refuses_while_nova_claims_a_managed_device(host):
    h = host()
    h.write_conf('device_spec = {"vendor_id": "10de", '
                 '"product_id": "2236"}\n')
    rc, out, err = h.cli('whitelist-sync', '--passthrough', NVME)
    assert rc == 1 and 'Traceback' not in err
    assert len(err.strip().splitlines()) == 1
    assert err.startswith('Nova\'s [pci] device_spec entry {"product_id": '
                          '"2236", "vendor_id": "10de"} (in %s) matches %s'
                          % (h.nova_conf, A10))
    assert not os.path.exists(h.drop_in)


def test_sync_refuses_a_managed_passthrough(host):
    h = host()
    rc, _, err = h.cli('whitelist-sync', '--passthrough', A10)
    assert rc == 1 and 'Traceback' not in err
    assert err.startswith('--passthrough %s: %s (accelerator of driver '
                          'nvidia_gpu) is managed by cyborg-nova' % (A10, A10))
    assert not os.path.exists(h.drop_in)


def test_sync_writes_the_drop_in_through_privsep(host):
    h = host()
    rc, out, err = h.cli('whitelist-sync', '--passthrough',
                         NVME + ':CUSTOM_NVME:CUSTOM_FAST')
    assert rc == 0, err
    assert out.splitlines() == [
        'wrote 1 device_spec entry to %s' % h.drop_in,
        whitelist.RESTART_NOTE]
    (spec,) = nova_reads(h.drop_in)
    assert spec.get_tags() == {'resource_class': 'CUSTOM_NVME',
                               'traits': 'CUSTOM_FAST'}
    assert oct(os.stat(h.drop_in).st_mode & 0o777) == oct(0o640)

    rc, out, _ = h.cli('whitelist-sync', '--passthrough',
                       NVME + ':CUSTOM_NVME:CUSTOM_FAST')
    assert rc == 0 and out == '%s is up to date; nothing to restart\n' \
        % h.drop_in
    # show reads the drop-in too, as nova-compute does with --config-dir.
    rc, out, _ = h.cli('whitelist-show', '-f', 'json')
    assert [(r['source'], r['matches']) for r in json.loads(out)] == [
        (h.drop_in, [NVME])]

    rc, out, err = h.cli('whitelist-sync')
    assert rc == 0, err
    assert out.startswith('wrote 0 device_spec entries')
    assert nova_reads(h.drop_in) == []


def test_sync_dry_run_writes_nothing(host):
    h = host()
    rc, out, err = h.cli('whitelist-sync', '--dry-run', '--passthrough',
                         NVME)
    assert rc == 0, err
    assert out.endswith('[pci]\ndevice_spec = {"address": "%s", '
                        '"vendor_id": "144d", "product_id": "a808"}\n'
                        % NVME)
    assert not os.path.exists(h.drop_in)
