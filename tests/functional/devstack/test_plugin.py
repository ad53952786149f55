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

"""The devstack plugin, phase by phase, against stub devstack functions.

Each phase runs ``plugin.sh`` the way devstack's stack.sh sources it,
with devstack's functions replaced by stubs that record their calls
(``iniset`` writes real INI files), and the test checks the calls and
the configuration the plugin leaves.
"""

import configparser
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))


@pytest.fixture
def devstack(tmp_path):
    nova_cpu_conf = tmp_path / 'etc' / 'nova' / 'nova-cpu.conf'
    env = {
        # The venv's commands first, as devstack installs them.
        'PATH': os.path.dirname(sys.executable) + os.pathsep
        + os.environ['PATH'],
        'DEST': str(tmp_path),
        'DATA_DIR': str(tmp_path / 'data'),
        'CYBORG_NOVA_DIR': TOP,
        'CYBORG_NOVA_CONF_DIR': str(tmp_path / 'etc' / 'cyborg-nova'),
        'NOVA_CPU_CONF': str(nova_cpu_conf),
        'TEMPEST_CONFIG': str(tmp_path / 'tempest' / 'etc' / 'tempest.conf'),
        'SERVICE_HOST': '192.0.2.10',
        'STACK_USER': os.environ.get('USER', 'root'),
        'VIRT_DRIVER': 'libvirt',
        'ENABLED_SERVICES': 'n-api,n-cpu,cyborg-nova-agent,'
                            'cyborg-nova-conductor',
        'CALLS': str(tmp_path / 'calls'),
        # No accelerators here: "auto" must pick the fake driver.
        'CYBORG_NOVA_HARDWARE': 'auto',
    }

    def phase(*args, **extra):
        script = ('source %s/tests/functional/devstack/stubs.sh; '
                  'source %s/devstack/settings; '
                  'source %s/devstack/plugin.sh %s'
                  % (TOP, TOP, TOP, ' '.join(args)))
        open(env['CALLS'], 'w').close()
        proc = subprocess.run(['bash', '-e', '-c', script],
                              env=dict(env, **extra), capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        with open(env['CALLS']) as f:
            return f.read().splitlines()

    def ini(path):
        parser = configparser.RawConfigParser()
        parser.read(path)
        return parser
    phase.env = env
    phase.ini = ini
    phase.nova_cpu_conf = str(nova_cpu_conf)
    return phase


def test_install_is_a_real_install(devstack):
    calls = devstack('stack', 'install')
    assert 'pip_install %s' % TOP in calls


def test_post_config(devstack):
    calls = devstack('stack', 'post-config')
    conf = devstack.ini(devstack.nova_cpu_conf)
    assert conf.get('DEFAULT', 'compute_driver') == (
        'cyborg_nova.LibvirtDriver')
    assert conf.get('cyborg_nova', 'enabled_drivers') == 'fake'
    assert conf.get('cyborg_fake', 'host_profile') == 'mixed-host'
    assert conf.get('cyborg_nova', 'auto_ready') == 'True'
    agent = devstack.ini(os.path.join(devstack.env['CYBORG_NOVA_CONF_DIR'],
                                      'agent.conf'))
    conductor = devstack.ini(os.path.join(
        devstack.env['CYBORG_NOVA_CONF_DIR'], 'conductor.conf'))
    assert agent.get('cyborg_agent', 'conductor_url') == (
        'http://192.0.2.10:6667')
    # The agent authenticates with the conductor's admin token, and the
    # conductor calls agents with the agents' reader token.
    assert agent.get('cyborg_agent', 'conductor_token') == conductor.get(
        'cyborg_conductor', 'admin_token')
    assert conductor.get('cyborg_conductor', 'agent_token') == agent.get(
        'cyborg_agent', 'reader_token')
    assert len(agent.get('cyborg_agent', 'admin_token')) == 48
    assert not any(c.startswith('run_process') for c in calls)
    # Tokens are kept across restacks.
    devstack('stack', 'post-config')
    again = devstack.ini(os.path.join(devstack.env['CYBORG_NOVA_CONF_DIR'],
                                      'agent.conf'))
    assert again.get('cyborg_agent', 'admin_token') == agent.get(
        'cyborg_agent', 'admin_token')


def test_post_config_fake_virt_and_real_hardware(devstack):
    devstack('stack', 'post-config', VIRT_DRIVER='fake',
             CYBORG_NOVA_HARDWARE='real')
    conf = devstack.ini(devstack.nova_cpu_conf)
    assert conf.get('DEFAULT', 'compute_driver') == (
        'cyborg_nova.FakeDriverWithoutFakeNodes')
    assert conf.get('cyborg_nova', 'enabled_drivers') == (
        'nvidia_gpu,intel_fpga,xilinx_fpga,intel_qat')
    assert not conf.has_section('cyborg_fake')


def test_extra_starts_services_and_creates_flavors(devstack):
    devstack('stack', 'post-config')
    calls = devstack('stack', 'extra')
    runs = [c for c in calls if c.startswith('run_process')]
    assert len(runs) == 2
    assert runs[0].startswith('run_process cyborg-nova-conductor ')
    assert '--config-file %s' % devstack.nova_cpu_conf in runs[1]
    flavors = [c for c in calls if c.startswith('openstack flavor create')]
    assert len(flavors) == 4
    assert any('resources:FPGA=1' in f and
               'trait:CUSTOM_FPGA_INTEL=required' in f for f in flavors)


def test_agent_only_on_a_compute(devstack):
    calls = devstack('stack', 'extra',
                     ENABLED_SERVICES='n-cpu,cyborg-nova-agent')
    runs = [c for c in calls if c.startswith('run_process')]
    assert [r.split()[1] for r in runs] == ['cyborg-nova-agent']
    assert not any(c.startswith('openstack') for c in calls)


def test_test_config_sets_up_the_tempest_plugin(devstack):
    devstack('stack', 'post-config')
    devstack('stack', 'test-config',
             ENABLED_SERVICES='n-api,tempest,cyborg-nova-conductor')
    tempest = devstack.ini(devstack.env['TEMPEST_CONFIG'])
    assert tempest.get('service_available', 'cyborg_nova') == 'True'
    assert tempest.get('accelerators', 'conductor_endpoint') == (
        'http://192.0.2.10:6667')
    conductor = devstack.ini(os.path.join(
        devstack.env['CYBORG_NOVA_CONF_DIR'], 'conductor.conf'))
    assert tempest.get('accelerators', 'conductor_token') == conductor.get(
        'cyborg_conductor', 'admin_token')
    assert 'CUSTOM_QAT' in tempest.get('accelerators', 'expected_traits')


def test_unstack_and_clean(devstack):
    devstack('stack', 'post-config')
    calls = devstack('unstack')
    assert calls[-2:] == ['stop_process cyborg-nova-agent',
                          'stop_process cyborg-nova-conductor']
    devstack('clean')
    assert not os.path.exists(devstack.env['CYBORG_NOVA_CONF_DIR'])


def test_not_enabled_does_nothing(devstack):
    calls = devstack('stack', 'install', ENABLED_SERVICES='n-cpu')
    assert not any(c.startswith('pip_install') for c in calls)


def test_bashate_clean():
    bashate = os.path.join(os.path.dirname(sys.executable), 'bashate')
    if not os.path.exists(bashate):
        bashate = shutil.which('bashate')
    if not bashate:
        pytest.skip('bashate is not installed (pip install bashate)')
    files = [os.path.join(TOP, 'devstack', f)
             for f in ('plugin.sh', 'settings', 'lib/cyborg-nova')]
    proc = subprocess.run([bashate, '-i', 'E006'] + files,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
