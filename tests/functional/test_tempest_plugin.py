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

"""The Tempest plugin, as Tempest sees it, without a cloud.

- the plugin is registered (``tempest list-plugins``) and loads;
- in a Tempest workspace its tests are listed;
- with ``[service_available] cyborg_nova = false`` they all skip, in
  ``skip_checks``, before any client is made: no cloud is needed;
- the contract the plugin checks clouds against (``common/
  accelerators.py``) agrees with the drivers, the fake host profiles and
  the flavors devstack creates.

Tests that need Tempest skip when it is not installed; the rest run
anyway.
"""

import json
import os
import re
import subprocess
import sys
import threading
from wsgiref import simple_server

import pytest

from cyborg_drivers import device as device_model
from cyborg_nova_tempest_plugin.common import accelerators as acc
from cyborg_nova_tempest_plugin import config as plugin_config

try:
    import tempest  # noqa: F401
    HAVE_TEMPEST = True
except ImportError:
    HAVE_TEMPEST = False
try:
    import nova  # noqa: F401
    HAVE_NOVA = True
except ImportError:
    HAVE_NOVA = False

requires_tempest = pytest.mark.skipif(
    not HAVE_TEMPEST, reason='tempest is not installed in this '
    'environment (it comes with test-requirements.txt)')

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
PLUGIN_NAME = 'cyborg_nova'
ENTRY_POINT = 'cyborg_nova_tempest_plugin.plugin:CyborgNovaTempestPlugin'
PACKAGE = 'cyborg_nova_tempest_plugin.tests.'
#: Every test class of the plugin.
TEST_CLASSES = {
    PACKAGE + 'api.test_providers.AcceleratorProvidersTest',
    PACKAGE + 'api.test_conductor.ConductorApiTest',
    PACKAGE + 'api.test_conductor.ConductorAgentsTest',
    PACKAGE + 'api.test_conductor.ConductorNegativeTest',
    PACKAGE + 'scenario.test_boot.AcceleratorBootTest',
    PACKAGE + 'scenario.test_capacity.AcceleratorCapacityTest',
    PACKAGE + 'scenario.test_reprogram.FpgaReprogramTest',
    PACKAGE + 'scenario.test_guest_device.GuestDeviceTest',
}
#: Some test ids (without their ``[...]`` attributes).
KNOWN_TESTS = [
    PACKAGE + 'api.test_providers.AcceleratorProvidersTest.'
    'test_providers_are_children_of_compute_nodes',
    PACKAGE + 'api.test_conductor.ConductorAgentsTest.'
    'test_compute_nodes_with_accelerators_have_up_agents',
    PACKAGE + 'api.test_conductor.ConductorNegativeTest.'
    'test_list_agents_without_token',
    PACKAGE + 'api.test_conductor.ConductorNegativeTest.'
    'test_hello_with_invalid_body',
    PACKAGE + 'scenario.test_boot.AcceleratorBootTest.'
    'test_boot_with_fpga_flavor',
    PACKAGE + 'scenario.test_capacity.AcceleratorCapacityTest.'
    'test_boot_beyond_capacity_fails_with_no_valid_host',
    PACKAGE + 'scenario.test_reprogram.FpgaReprogramTest.'
    'test_reprogram_allocated_fpga_is_refused',
]
SERVICE_UNAVAILABLE = ('cyborg-nova is not available in this cloud '
                       '([service_available] cyborg_nova = False)')


def _script(name):
    path = os.path.join(BIN, name)
    if not os.path.exists(path):
        pytest.fail('%s is importable but its %s script is not in %s'
                    % ('tempest', name, BIN))
    return path


def _run(argv, cwd, home, timeout=300):
    """Run a Tempest command with a private HOME and no cloud settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(('OS_', 'TEMPEST_'))}
    # "tempest init" also writes under ~/.tempest.
    env['HOME'] = str(home)
    proc = subprocess.run(argv, cwd=str(cwd), env=env, capture_output=True,
                          text=True, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture(scope='module')
def workspace(tmp_path_factory):
    """A Tempest workspace whose tempest.conf has cyborg-nova disabled."""
    base = tmp_path_factory.mktemp('tempest')
    cloud = base / 'cloud'
    rc, out = _run([_script('tempest'), 'init', '--workspace-path',
                    str(base / 'workspace.yaml'), str(cloud)], base, base)
    assert rc == 0, out
    conf = cloud / 'etc' / 'tempest.conf'
    with open(conf, 'a') as f:
        f.write('\n[service_available]\ncyborg_nova = false\n')
    return cloud


# -- the plugin as Tempest loads it ---------------------------------------


@requires_tempest
def test_entry_point_loads_the_plugin():
    from importlib import metadata

    from oslo_config import cfg
    from tempest.test_discover import plugins

    found = [ep for ep in metadata.entry_points(group='tempest.test_plugins')
             if ep.name == PLUGIN_NAME]
    assert [ep.value for ep in found] == [ENTRY_POINT]
    plugin = found[0].load()()
    assert isinstance(plugin, plugins.TempestPlugin)
    test_dir, top_level = plugin.load_tests()
    assert os.path.isdir(os.path.join(test_dir, 'api'))
    assert os.path.isdir(os.path.join(top_level,
                                      'cyborg_nova_tempest_plugin'))
    conf = cfg.ConfigOpts()
    plugin.register_opts(conf)
    conf([])
    assert conf.service_available.cyborg_nova is False
    assert conf.accelerators.fpga_flavor == 'accel.fpga.intel'
    assert conf.accelerators.reprogramming is False
    groups = dict(plugin.get_opt_lists())
    assert {'accelerators', 'service_available'} == set(groups)


@requires_tempest
def test_tempest_list_plugins(tmp_path):
    rc, out = _run([_script('tempest'), 'list-plugins'], tmp_path, tmp_path)
    assert rc == 0, out
    assert re.search(r'\|\s*%s\s*\|\s*%s\s*\|' % (PLUGIN_NAME, ENTRY_POINT),
                     out), out


@requires_tempest
def test_tempest_lists_the_tests(workspace):
    rc, out = _run([_script('tempest'), 'run', '--list-tests', '--regex',
                    'cyborg_nova_tempest_plugin'], workspace,
                   workspace.parent)
    assert rc == 0, out
    ids = {line.split('[')[0] for line in out.splitlines()
           if line.startswith(PACKAGE)}
    assert set(KNOWN_TESTS) <= ids, out
    assert {i.rsplit('.', 1)[0] for i in ids} == TEST_CLASSES
    # Every test has an idempotent id.
    for line in out.splitlines():
        if line.startswith(PACKAGE):
            assert re.search(r'\bid-[0-9a-f-]{36}\b', line), line


@requires_tempest
def test_tests_skip_without_the_service(workspace):
    rc, out = _run([_script('tempest'), 'run', '--concurrency', '2',
                    '--regex', 'cyborg_nova_tempest_plugin'], workspace,
                   workspace.parent)
    print(out)
    skipped = dict(re.findall(
        r'setUpClass \((\S+)\) \.\.\. SKIPPED: (.*)$', out, re.M))
    assert set(skipped) == TEST_CLASSES, out
    assert set(skipped.values()) == {SERVICE_UNAVAILABLE}
    assert re.search(r'- Failed: 0$', out, re.M), out
    assert re.search(r'- Skipped: %d$' % len(TEST_CLASSES), out, re.M), out
    # stestr exits 1 when no test passed, even if none failed.
    assert rc == 0 or (rc == 1 and 'No tests were successful' in out), out


# -- the API tests against real services -----------------------------------


class FakeIdentity(object):
    """Keystone v3 enough for Tempest, and Nova's hypervisor list.

    Every password gets token ``admin`` (Placement's noauth2 admin) and a
    catalog with ``placement`` and ``compute`` (this server); the only
    compute call the API tests make lists ``hypervisors``.
    """

    def __init__(self, placement, hypervisors):
        self.placement = placement
        self.hypervisors = hypervisors
        self.server = simple_server.make_server(
            '127.0.0.1', 0, self, handler_class=_QuietHandler)
        self.url = 'http://127.0.0.1:%d' % self.server.server_port
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def _catalog(self):
        def service(kind, url):
            return {'type': kind, 'name': kind, 'id': kind, 'endpoints': [
                {'interface': 'public', 'region': 'RegionOne',
                 'region_id': 'RegionOne', 'id': kind, 'url': url}]}
        return [service('placement', self.placement),
                service('compute', self.url + '/compute/v2.1'),
                service('identity', self.url + '/v3')]

    def __call__(self, environ, start_response):
        path = environ['PATH_INFO']
        method = environ['REQUEST_METHOD']
        headers = [('Content-Type', 'application/json')]
        if (method, path) == ('POST', '/v3/auth/tokens'):
            domain = {'id': 'default', 'name': 'Default'}
            body = {'token': {
                'methods': ['password'],
                'expires_at': '2099-01-01T00:00:00.000000Z',
                'issued_at': '2000-01-01T00:00:00.000000Z',
                'user': {'id': 'admin', 'name': 'admin', 'domain': domain},
                'project': {'id': 'admin', 'name': 'admin',
                            'domain': domain},
                'roles': [{'id': 'admin', 'name': 'admin'}],
                'catalog': self._catalog()}}
            status = '201 Created'
            headers.append(('X-Subject-Token', 'admin'))
        elif (method, path) == ('GET', '/compute/v2.1/os-hypervisors'):
            body = {'hypervisors': [
                {'id': i + 1, 'hypervisor_hostname': name, 'state': 'up',
                 'status': 'enabled'}
                for i, name in enumerate(self.hypervisors)]}
            status = '200 OK'
        else:
            body = {'error': 'not faked: %s %s' % (method, path)}
            status = '404 Not Found'
        start_response(status, headers)
        return [json.dumps(body).encode()]


class _QuietHandler(simple_server.WSGIRequestHandler):
    def log_message(self, *args):
        pass


@requires_tempest
@pytest.mark.skipif(not HAVE_NOVA, reason='nova is not installed: '
                    'tools/report_host.py fills Placement with its report '
                    'client')
def test_api_tests_pass_against_real_services(host_tree, tmp_path):
    """The plugin's API tests pass on what cyborg-nova really reports.

    A real Placement filled by tools/report_host.py (Nova's report client
    and cyborg-nova's provider tree code, from the mixed-host profile), a
    real agent on the same host and a real conductor-lite; only Keystone
    and Nova's hypervisor list are faked.
    """
    from tests.functional.agent import base as agent_base
    from tests.functional.conductor import conductor_fixture
    from tests.functional import placement_fixture

    root = host_tree('mixed-host')
    state_path = str(tmp_path / 'state.sqlite')
    placement = placement_fixture.PlacementServer()
    placement.setUp()
    conductor = agent = None
    try:
        agent_base.report_host(placement.endpoint, agent_base.NODENAME,
                               root, state_path)
        conductor = conductor_fixture.Conductor(tmp_path / 'conductor')
        conductor.start()
        agent = agent_base.AgentProcess(str(tmp_path), {
            'cyborg_agent': {'conductor_url': conductor.url,
                             'conductor_token': conductor_fixture.ADMIN,
                             'heartbeat_interval': '1'},
            'cyborg_nova': {'sysfs_root': root, 'state_path': state_path}})
        agent.setUp()
        agent_base.wait_for(
            lambda: [a for a in conductor.call('GET', '/agents')[1]['agents']
                     if a['host'] == agent_base.NODENAME
                     and a['state'] == 'UP'],
            timeout=30, what='the agent to be UP at the conductor-lite')
        with FakeIdentity(placement.endpoint,
                          [agent_base.NODENAME, 'no-accelerators']) as ks:
            rc, out = _api_tests(tmp_path, ks.url, conductor.url,
                                 conductor_fixture.ADMIN)
    finally:
        if agent is not None:
            agent.cleanUp()
        if conductor is not None:
            conductor.stop()
        placement.cleanUp()
    print(out)
    assert rc == 0, out
    assert re.search(r'- Failed: 0$', out, re.M), out
    assert re.search(r'- Skipped: 0$', out, re.M), out
    assert re.search(r'- Passed: 15$', out, re.M), out


def _api_tests(base, identity, conductor_url, conductor_token):
    """``tempest run`` of the plugin's API tests in a new workspace."""
    cloud = base / 'cloud'
    rc, out = _run([_script('tempest'), 'init', '--workspace-path',
                    str(base / 'workspace.yaml'), str(cloud)], base, base)
    assert rc == 0, out
    accounts = cloud / 'etc' / 'accounts.yaml'
    # One admin per test worker.
    accounts.write_text(''.join(
        '- username: admin%d\n  password: secret\n  project_name: admin\n'
        '  user_domain_name: Default\n  project_domain_name: Default\n'
        '  roles: [admin]\n' % i for i in range(2)))
    with open(cloud / 'etc' / 'tempest.conf', 'a') as f:
        f.write('\n'.join([
            '',
            '[auth]',
            'use_dynamic_credentials = false',
            'test_accounts_file = %s' % accounts,
            '[identity]',
            'auth_version = v3',
            'uri_v3 = %s/v3' % identity,
            '[service_available]',
            'cyborg_nova = true',
            '[accelerators]',
            'conductor_endpoint = %s' % conductor_url,
            'conductor_token = %s' % conductor_token,
            'expected_resource_classes = FPGA,PGPU,CUSTOM_QAT',
            'expected_traits = CUSTOM_FPGA_INTEL,'
            'CUSTOM_FPGA_INTEL_PAC_ARRIA10,CUSTOM_FPGA_INTEL_PAC_N3000,'
            # mixed-host's QAT is a C62x: its kernel shows no services.
            'CUSTOM_NVIDIA_1EB8,CUSTOM_QAT',
            '']))
    return _run([_script('tempest'), 'run', '--concurrency', '2',
                 '--regex', r'cyborg_nova_tempest_plugin\.tests\.api'],
                cloud, base)


# -- the contract the plugin checks ----------------------------------------


def test_provider_uuid_is_the_drivers():
    """The plugin's copy of the uuid scheme is the one the code uses."""
    for node, address in (('compute-1', '0000:3b:00.0'),
                          ('n.example.org', '10000:01:00.7')):
        assert acc.provider_uuid(node, address) == device_model.device_uuid(
            node, address)


def test_provider_names():
    assert acc.provider_address('cn1_accelerator_0000:3b:00.0',
                                'cn1') == '0000:3b:00.0'
    assert acc.provider_address('cn1_accelerator_0000:3b:00.0',
                                'cn2') is None
    assert acc.provider_address('cn1_accelerator_3b:00.0', 'cn1') is None
    assert acc.provider_address('cn1_accelerator_0000:3B:00.0',
                                'cn1') is None
    assert acc.is_accelerator_name('my_accelerator_node_accelerator_'
                                   '0000:3b:00.0')
    assert not acc.is_accelerator_name('cn1')
    assert not acc.is_accelerator_name('cn1_accelerator_')


def test_trait_problems():
    assert acc.trait_problems({'FPGA'}, {'OWNER_CYBORG',
                                         'CUSTOM_FPGA_XILINX'}) == []
    assert acc.trait_problems({'FPGA'}, {'CUSTOM_FPGA_INTEL'}) == [
        'no OWNER_CYBORG trait']
    problems = acc.trait_problems({'PGPU'}, {'OWNER_CYBORG', 'CUSTOM_QAT'})
    assert len(problems) == 1 and 'PGPU' in problems[0]
    # The generic driver may report any class with its product trait.
    assert acc.trait_problems({'FPGA'}, {
        'OWNER_CYBORG', 'CUSTOM_PCI_PRODUCT_ID_A808'}) == []
    assert acc.trait_problems({'CUSTOM_MY_CARD'}, {'OWNER_CYBORG'}) == []


def test_request_groups_and_query():
    specs = {
        'resources:FPGA': '1', 'trait:CUSTOM_FPGA_INTEL': 'required',
        'resources:VCPU': '2', 'hw:cpu_policy': 'dedicated',
        'resources1:CUSTOM_QAT': '2', 'trait1:CUSTOM_QAT_SYM': 'required',
        'trait1:CUSTOM_QAT_DC': 'forbidden',
        'trait2:CUSTOM_UNUSED': 'required',
        'resources3:MEMORY_MB': '0',
    }
    groups = acc.request_groups(specs)
    assert set(groups) == {'', '1'}
    accel = acc.accelerator_groups(groups)
    assert accel[''] == {'resources': {'FPGA': 1},
                         'required': {'CUSTOM_FPGA_INTEL'},
                         'forbidden': set()}
    assert acc.candidate_query(accel) == {
        'root_required': '!COMPUTE_STATUS_DISABLED',
        'resources': 'FPGA:1', 'required': 'CUSTOM_FPGA_INTEL',
        'resources1': 'CUSTOM_QAT:2',
        'required1': 'CUSTOM_QAT_SYM,!CUSTOM_QAT_DC',
        'group_policy': 'none'}
    assert acc.group_names(accel) == (
        {'CUSTOM_FPGA_INTEL', 'CUSTOM_QAT_SYM', 'CUSTOM_QAT_DC'},
        {'FPGA', 'CUSTOM_QAT'})
    known = acc.restrict_to_known(accel, {'CUSTOM_FPGA_INTEL',
                                          'CUSTOM_QAT_SYM'},
                                  {'FPGA', 'CUSTOM_QAT'})
    assert known['1']['forbidden'] == set()
    assert acc.restrict_to_known(accel, {'CUSTOM_FPGA_INTEL'},
                                 {'FPGA', 'CUSTOM_QAT'}) is None
    assert acc.restrict_to_known(accel, {'CUSTOM_FPGA_INTEL',
                                         'CUSTOM_QAT_SYM'}, {'FPGA'}) is None


def test_free_slots():
    candidates = {
        'allocation_requests': [
            {'allocations': {'a': {'resources': {'CUSTOM_QAT': 2}}}},
            {'allocations': {'b': {'resources': {'CUSTOM_QAT': 2}},
                             'root': {'resources': {'VCPU': 1}}}},
        ],
        'provider_summaries': {
            'a': {'resources': {'CUSTOM_QAT': {'capacity': 8, 'used': 3}}},
            'b': {'resources': {'CUSTOM_QAT': {'capacity': 2, 'used': 0}}},
            'c': {'resources': {'CUSTOM_QAT': {'capacity': 8, 'used': 0}}},
            'root': {'resources': {'VCPU': {'capacity': 8, 'used': 0}}},
        },
    }
    assert acc.free_slots(candidates, 'CUSTOM_QAT', 2) == 2 + 1
    assert acc.free_slots({'allocation_requests': []}, 'FPGA', 1) == 0


def _discover(host_tree, profile, config=None):
    cli = os.path.join(BIN, 'cyborg-nova')
    argv = [cli]
    if config:
        argv += ['--config-file', config]
    proc = subprocess.run(argv + ['discover', '--sysfs-root',
                                  host_tree(profile), '-f', 'json'],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize('profile', ['gpu-host', 'fpga-host',
                                     'crypto-nic-host', 'mixed-host'])
def test_drivers_meet_the_contract(host_tree, tmp_path, profile):
    """What the drivers report passes the plugin's provider checks."""
    conf = tmp_path / 'nova.conf'
    conf.write_text('[cyborg_nic_sriov]\n'
                    'physical_device_mappings = physnet1:ens1f0\n')
    rows = _discover(host_tree, profile, str(conf))
    assert rows
    for row in rows:
        assert row['resource_class'] in acc.DOCUMENTED_RESOURCE_CLASSES
        traits = set(row['traits']) | {acc.OWNER_TRAIT}
        assert acc.trait_problems({row['resource_class']}, traits) == [], row


def _devstack_flavors():
    """``{name: extra specs}`` of the flavors devstack creates."""
    with open(os.path.join(REPO, 'devstack', 'lib', 'cyborg-nova')) as f:
        text = f.read()
    block = re.search(r'<<FLAVORS\n(.*?)\nFLAVORS', text, re.S).group(1)
    flavors = {}
    for line in block.splitlines():
        name, _, props = line.partition(' ')
        flavors[name] = dict(p.split('=', 1) for p in
                             re.findall(r'--property (\S+)', props))
    return flavors


def test_default_flavors_are_devstacks_and_fit_its_ci_host(host_tree):
    """The option defaults name devstack's flavors; mixed-host has them.

    Except Xilinx, which mixed-host (the fake driver's CI host) lacks:
    that boot test skips in devstack CI for want of a candidate.
    """
    flavors = _devstack_flavors()
    defaults = {o.name: o.default for o in plugin_config.AcceleratorsGroup}
    options = ['fpga_flavor', 'xilinx_flavor', 'gpu_flavor', 'qat_flavor',
               'capacity_flavor']
    assert {defaults[o] for o in options} <= set(flavors)
    rows = _discover(host_tree, 'mixed-host')

    def fits(group):
        return any(row['resource_class'] in group['resources']
                   and row['total'] >= group['resources'][
                       row['resource_class']]
                   and group['required'] <= set(row['traits'])
                   for row in rows)

    satisfied = {
        name for name, specs in flavors.items()
        if all(fits(g) for g in acc.accelerator_groups(
            acc.request_groups(specs)).values())}
    assert satisfied == set(flavors) - {'accel.fpga.xilinx'}
