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

"""PCIe AER health end to end: update cycles, Placement, the commands.

A fake FPGA host whose functions carry the kernel's AER counter files;
each update is nova-compute's (tools/report_host.py: Nova's report
client and ProviderTree, the project's ProviderTreeUpdater, with
``[cyborg_aer]`` from the host's config file) against the real Placement
server, and the operator's commands are ``cyborg-nova``'s. Both run from
this working tree (first on PYTHONPATH), whatever copy is installed.
"""

import json
import os
import subprocess
import sys

import pytest

from cyborg_drivers.fake import hosttree
from tests import aer_sysfs
from tests.functional import placement_fixture

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
ALVEO = '0000:d8:00.0'
USER_FN = '0000:d8:00.1'
PAC = '0000:5e:00.0'
TRAIT = 'CUSTOM_PCIE_AER_ERRORS'
DRIVERS = 'intel_fpga,xilinx_fpga'


def env(**extra):
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith('OS_')}
    environ['PYTHONPATH'] = os.pathsep.join(
        p for p in (REPO, environ.get('PYTHONPATH')) if p)
    environ.update(extra)
    return environ


class Host:
    """A fake FPGA host reported to Placement as nova-compute does."""

    def __init__(self, tmp_path, endpoint, nodename, aer_options=()):
        self.endpoint = endpoint
        self.nodename = nodename
        self.root = str(tmp_path / 'sys')
        hosttree.build_tree(hosttree.profile_path('fpga-host'), self.root)
        for address in (ALVEO, USER_FN, PAC):
            aer_sysfs.write(self.root, address)
        self.state = str(tmp_path / 'state.sqlite')
        self.conf = str(tmp_path / 'nova.conf')
        with open(self.conf, 'w') as f:
            f.write('[cyborg_nova]\nsysfs_root = %s\nstate_path = %s\n'
                    'enabled_drivers = %s\n[cyborg_aer]\n%s'
                    % (self.root, self.state, DRIVERS, ''.join(
                        '%s = %s\n' % kv for kv in aer_options)))

    def report(self):
        proc = subprocess.run(
            [sys.executable, '-W', 'ignore',
             os.path.join(placement_fixture.TOOLS, 'report_host.py'),
             '--placement', self.endpoint, '--nodename', self.nodename,
             '--sysfs-root', self.root, '--state-path', self.state,
             '--drivers', DRIVERS, '--config-file', self.conf],
            capture_output=True, text=True, env=env(), timeout=120)
        assert proc.returncode == 0, proc.stderr

    def cli(self, *args):
        proc = subprocess.run(
            [sys.executable, '-W', 'ignore', '-m', 'cyborg_nova.cmd.cli',
             '--config-file', self.conf] + list(args),
            capture_output=True, text=True, cwd=REPO, timeout=120,
            env=env(OS_AUTH_TYPE='admin_token', OS_TOKEN='admin',
                    OS_ENDPOINT=self.endpoint))
        return proc.returncode, proc.stdout, proc.stderr

    def get(self, path):
        import urllib.request
        req = urllib.request.Request(
            self.endpoint + path,
            headers={'X-Auth-Token': 'admin',
                     'OpenStack-API-Version': 'placement 1.39'})
        with urllib.request.urlopen(req) as resp:
            return json.loads(resp.read())

    def provider(self, address):
        (rp,) = self.get('/resource_providers?name=%s_accelerator_%s'
                         % (self.nodename, address))['resource_providers']
        return rp['uuid']

    def held(self, address):
        """(reserved, total, traits) of the device's provider."""
        uuid = self.provider(address)
        (inv,) = self.get('/resource_providers/%s/inventories'
                          % uuid)['inventories'].values()
        traits = self.get('/resource_providers/%s/traits' % uuid)['traits']
        return inv['reserved'], inv['total'], TRAIT in traits

    def devices(self):
        rc, out, err = self.cli('device-list', '--nodename', self.nodename,
                                '-f', 'json')
        assert rc == 0, err
        return {row['address']: row for row in json.loads(out)}

    def audit(self):
        """(status, the aer-errors rows, the summary line)."""
        rc, out, err = self.cli('audit', '--nodename', self.nodename,
                                '--libvirt-uri', 'test:///default',
                                '-f', 'json')
        assert 'Traceback' not in err, err
        rows = [r for r in json.loads(out) if r['kind'] == 'aer-errors']
        return rc, rows, err.strip().splitlines()[-1]


@pytest.fixture
def host(placement, tmp_path, request):
    def make(**aer_options):
        return Host(tmp_path, placement.endpoint,
                    'cn-aer-%s' % request.node.name[-40:].replace('[', '-')
                    .replace(']', ''), sorted(aer_options.items()))
    return make


def test_a_fatal_error_fences_until_the_operator_clears_it(host):
    h = host()
    h.report()
    assert h.held(ALVEO) == (0, 1, False)
    assert h.audit()[:2] == (0, [])

    aer_sysfs.write(h.root, USER_FN, fatal=1)
    h.report()
    # Fenced in Placement, with the informational trait; nothing else.
    assert h.held(ALVEO) == (1, 1, True)
    assert h.held(PAC) == (0, 1, False)
    row = h.devices()[ALVEO]
    assert row['state'] == 'unhealthy'
    assert row['reason'].startswith(
        'PCIe AER: 1 fatal error(s) on 0000:d8:00.1 since')

    # discover --long shows the counts of both functions and the effect.
    rc, out, err = h.cli('discover', '--long', '--driver', 'xilinx_fpga',
                         '--nodename', h.nodename, '-f', 'json')
    assert rc == 0, err
    (alveo,) = json.loads(out)
    assert [(c['address'], c['fatal'], c['correctable'])
            for c in alveo['aer']] == [(ALVEO, 0, 0), (USER_FN, 1, 0)]
    assert alveo['aer_effect'].startswith('fence: PCIe AER: 1 fatal')
    rc, out, err = h.cli('discover', '--long', '--driver', 'xilinx_fpga',
                         '--nodename', h.nodename)
    assert '0000:d8:00.1: fatal 1, nonfatal 0, correctable 0 (CmpltTO 1)' \
        in out

    # audit lists it, and it is not an inconsistency.
    rc, rows, summary = h.audit()
    assert rc == 0
    assert [(r['device'], r['units']) for r in rows] == [
        (ALVEO, [USER_FN])]
    assert 'fatal 1' in rows[0]['message']
    assert 'effect fence' in rows[0]['message']
    assert summary.endswith('1 accelerator(s) with PCIe AER errors')

    # Another update changes nothing: still fenced.
    h.report()
    assert h.held(ALVEO) == (1, 1, True)

    # The operator clears it: the counts now are the baseline.
    rc, out, err = h.cli('device-set-state', ALVEO, 'ready',
                         '--nodename', h.nodename)
    assert rc == 0, err
    h.report()
    assert h.held(ALVEO) == (0, 1, False)
    assert h.devices()[ALVEO]['state'] == 'ready'
    assert h.audit()[:2] == (0, [])

    # A new fatal error fences it again.
    aer_sysfs.write(h.root, USER_FN, fatal=2)
    h.report()
    assert h.held(ALVEO) == (1, 1, True)


@pytest.mark.parametrize('effect,held', [
    ('none', (0, 1, False)),
    ('inform', (0, 1, True)),
    ('fence', (1, 1, True)),
])
def test_correctable_errors_above_the_rate_take_the_configured_effect(
        host, effect, held):
    h = host(correctable_effect=effect, correctable_per_hour=2)
    h.report()
    aer_sysfs.write(h.root, PAC, correctable=2)
    h.report()
    assert h.held(PAC) == (0, 1, False)
    aer_sysfs.write(h.root, PAC, correctable=3)
    h.report()
    assert h.held(PAC) == held
    assert h.devices()[PAC]['state'] == (
        'unhealthy' if effect == 'fence' else 'ready')
    # A clear takes the trait off at the next update.
    if effect != 'none':
        rc, _, err = h.cli('device-set-state', PAC, 'ready', '--nodename',
                           h.nodename)
        assert rc == 0, err
        h.report()
        assert h.held(PAC) == (0, 1, False)


def test_counters_that_cannot_be_read_are_unknown(host):
    h = host()
    aer_sysfs.remove(h.root, ALVEO)
    aer_sysfs.remove(h.root, USER_FN)
    h.report()
    assert h.held(ALVEO) == (0, 1, False)
    rc, out, err = h.cli('discover', '--long', '--driver', 'xilinx_fpga',
                         '-f', 'json')
    assert rc == 0, err
    (alveo,) = json.loads(out)
    assert [(c['address'], c['known'], c['fatal'])
            for c in alveo['aer']] == [(ALVEO, False, None),
                                       (USER_FN, False, None)]
    assert all(c['reason'].startswith('no AER counters in sysfs')
               for c in alveo['aer'])
