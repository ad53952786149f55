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

"""Fixtures of the hot-plug tests: a real libvirtd, a real Placement.

``host`` is one compute host for the whole session: a fake sysfs tree
from the ``crypto-nic-host`` profile (three QAT PFs with 16 VFs each,
the ``intel_qat`` driver), its state store, and a Placement server that
``tools/report_host.py`` filled as nova-compute would. Each test boots
its own instances: a libvirt domain (``domains``) and the allocations
Nova would have written for it (``host.boot``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
import uuid

from keystoneauth1 import adapter
from keystoneauth1 import session
from keystoneauth1 import token_endpoint
import pytest

from cyborg_drivers import discovery
from cyborg_drivers.fake import hosttree
from cyborg_drivers import loader
from cyborg_nova.cmd import cli
from cyborg_nova import providers
from cyborg_nova import store as state_store
from tests.functional.libvirt import libvirtd_fixture
from tests.functional import placement_fixture

NODE = 'cn-hotplug'
DRIVERS = 'intel_qat'
REPO = os.path.dirname(placement_fixture.TOOLS)
# The commands as cyborg-nova runs them, from this tree, whether or not
# the installed entry points list them yet.
CLI = """
import sys
from cyborg_nova.cmd import attach, cli
app = cli.CyborgNovaApp()
app.command_manager.add_command('instance-attach', attach.InstanceAttach)
app.command_manager.add_command('instance-detach', attach.InstanceDetach)
sys.exit(app.run(sys.argv[1:]))
"""


@pytest.fixture(scope='session')
def libvirtd(request):
    """The system libvirtd, started here if it was not running."""
    daemon = libvirtd_fixture.LibvirtDaemon()
    try:
        daemon.start()
    except libvirtd_fixture.Unavailable as exc:
        message = 'libvirt tests skipped: %s' % exc
        plugins = request.config.pluginmanager
        reporter = plugins.get_plugin('terminalreporter')
        capture = plugins.get_plugin('capturemanager')
        if reporter is not None and capture is not None:
            # Said on the terminal at once, not only in the -rs summary.
            with capture.global_and_fixture_disabled():
                reporter.write_line('')
                reporter.write_line(message, yellow=True, bold=True)
        else:
            print(message, file=sys.stderr)
        pytest.skip(message)
    yield daemon
    daemon.stop()


@dataclasses.dataclass
class Domain:
    server: str
    dom: object

    def xml(self, inactive: bool = False) -> str:
        import libvirt
        return self.dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE
                                if inactive else 0)


@pytest.fixture
def domains(libvirtd):
    """``make(running=True)``: a new instance's domain; removed after."""
    import libvirt
    conn = libvirt.open(libvirtd_fixture.URI)
    made = []

    def make(running: bool = True) -> Domain:
        server = str(uuid.uuid4())
        dom = conn.defineXML(libvirtd_fixture.domain_xml(
            server, 'cyborg-test-%s' % server[:13]))
        made.append(dom)
        if running:
            dom.create()
        return Domain(server, dom)
    yield make
    for dom in made:
        try:
            if dom.isActive():
                dom.destroy()
            dom.undefine()
        except libvirt.libvirtError:
            pass
    conn.close()


class Host:
    """One compute host: sysfs tree, state store, Placement, config."""

    nodename = NODE

    def __init__(self, tmp, server: placement_fixture.PlacementServer):
        self.endpoint = server.endpoint
        self.env = server.env()
        self.sysfs_root = str(tmp / 'sys')
        hosttree.build_tree(hosttree.profile_path('crypto-nic-host'),
                            self.sysfs_root)
        self.state_path = str(tmp / 'state.sqlite')
        self.conf_path = str(tmp / 'nova.conf')
        with open(self.conf_path, 'w') as f:
            f.write('[cyborg_nova]\nsysfs_root = %s\nstate_path = %s\n'
                    'enabled_drivers = %s\n'
                    % (self.sysfs_root, self.state_path, DRIVERS))
        self.root = self._report()['root']
        self.conf = cli.load_config([self.conf_path])
        self.store = state_store.StateStore(self.state_path)
        self.client = adapter.Adapter(
            session.Session(auth=token_endpoint.Token(self.endpoint,
                                                      'admin')),
            service_type='placement')
        self.accelerators = discovery.Discoverer(
            loader.load(self.conf, [DRIVERS]),
            self.sysfs_root).discover().by_address()

    def _report(self) -> dict:
        proc = subprocess.run(
            [sys.executable, '-W', 'ignore',
             os.path.join(placement_fixture.TOOLS, 'report_host.py'),
             '--placement', self.endpoint, '--nodename', NODE,
             '--sysfs-root', self.sysfs_root, '--state-path',
             self.state_path, '--drivers', DRIVERS],
            capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    def provider(self, address: str) -> str:
        return providers.provider_uuid(NODE, address)

    def placement(self, method: str, path: str, body=None,
                  version: str = '1.39'):
        """(status, JSON body or None) of one request, errors included."""
        req = urllib.request.Request(
            self.endpoint + path, method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={'X-Auth-Token': 'admin',
                     'OpenStack-API-Version': 'placement %s' % version,
                     'Content-Type': 'application/json'})
        try:
            with urllib.request.urlopen(req) as resp:
                status, text = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, text = exc.code, exc.read()
        return status, json.loads(text) if text else None

    def boot(self, server: str) -> dict:
        """The allocations Nova writes when it boots ``server``."""
        status, body = self.placement('PUT', '/allocations/%s' % server, {
            'allocations': {self.root: {'resources': {
                'VCPU': 1, 'MEMORY_MB': 64, 'DISK_GB': 1}}},
            'project_id': str(uuid.uuid4()), 'user_id': str(uuid.uuid4()),
            'consumer_generation': None, 'consumer_type': 'INSTANCE'})
        assert status == 204, body
        return self.allocations(server)

    def allocations(self, server: str) -> dict:
        status, body = self.placement('GET', '/allocations/%s' % server)
        assert status == 200, body
        return body

    def usage(self, address: str) -> dict:
        status, body = self.placement(
            'GET', '/resource_providers/%s/usages' % self.provider(address))
        assert status == 200, body
        return body['usages']

    def cli(self, *args: str) -> tuple[int, str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith('OS_')}
        env.update(self.env)
        proc = subprocess.run(
            [sys.executable, '-W', 'ignore', '-c', CLI, '--config-file',
             self.conf_path] + list(args) + ['--nodename', NODE],
            capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
        return proc.returncode, proc.stdout, proc.stderr


def without_generations(body: dict) -> dict:
    """An allocations body without the generations a write bumps."""
    return {
        **{k: v for k, v in body.items() if k != 'consumer_generation'},
        'allocations': {rp: {k: v for k, v in alloc.items()
                             if k != 'generation'}
                        for rp, alloc in body['allocations'].items()}}


@pytest.fixture(scope='session')
def host_once(tmp_path_factory):
    server = placement_fixture.PlacementServer()
    server.setUp()
    try:
        yield Host(tmp_path_factory.mktemp('hotplug-host'), server)
    finally:
        server.cleanUp()


@pytest.fixture
def host(host_once):
    """The session's host; what a test's detaches held, freed after it.

    A detach holds the units it frees for nova-compute to scrub (see
    cyborg_nova.scrub); no nova-compute runs here, so the next test
    would find them taken. They are given back as a scrub would, then
    reserved is reported again; the scrub itself is tested with
    nova-compute (tests/functional/nova/test_scrub.py).
    """
    yield host_once
    store = host_once.store
    holds = store.units.holds()
    if holds:
        with store.units.change() as table:
            for hold in holds:
                table.lift(hold.provider, hold.unit)
        host_once._report()
