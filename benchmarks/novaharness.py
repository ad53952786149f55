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

"""Nova's functional harness, driven from a benchmark rather than a test run.

One :class:`TrafficScenario` is one Nova functional test: a fresh
in-memory Placement (behind a request-counting middleware), API,
conductor and scheduler in this process, then one compute host that
reports a host profile's accelerators either through cyborg-nova
(``compute_driver = cyborg_nova.MediumFakeDriver``) or through Nova's own
PCI-in-placement (``fake.MediumFakeDriver`` with ``[pci]
report_in_placement``). :func:`run_scenario` runs it with unittest and
returns what it measured. Nothing of Nova or Placement is mocked; Nova's
fake driver is only handed the host's PCI devices, as libvirt would.

Import ``nova.tests.functional`` (it patches eventlet) before this
module, and run Nova's harness in its own process.
"""

from __future__ import annotations

import collections
import json
import os
import re
import sys
import time
import unittest

import fixtures
import nova.conf
from nova import context as nova_context
from nova.tests.functional import integrated_helpers
from nova.virt import fake as nova_fake
from oslo_config import cfg
from placement import deploy
import sidebyside  # a sibling: the benchmarks run as scripts

from cyborg_drivers import discovery
from cyborg_drivers.fake import hosttree
from cyborg_drivers import loader
from cyborg_nova import conf as cn_conf

CONF = nova.conf.CONF
WRITES = ('PUT', 'POST', 'DELETE', 'PATCH')
CYBORG_NOVA = 'cyborg-nova'
NOVA_PCI = 'nova-pci'
DRIVERS = {CYBORG_NOVA: 'cyborg_nova.MediumFakeDriver',
           NOVA_PCI: 'fake.MediumFakeDriver'}
HOST = 'compute1'
_UUID_RE = re.compile(r'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-'
                      r'[0-9a-f]{4}-[0-9a-f]{12}')
_BRIDGE_CLASS = 0x0604


class RequestCounter:
    """WSGI middleware in front of Placement: each request and its time.

    The time is what Placement took to build the response (the app
    call), not the client's side of the request.
    """

    def __init__(self, app):
        self.app = app
        self.requests = []

    def __call__(self, environ, start_response):
        path = environ['PATH_INFO']
        if environ.get('QUERY_STRING'):
            path += '?' + environ['QUERY_STRING']
        status = []

        def recording_start_response(code, headers, exc_info=None):
            status.append(int(code.split()[0]))
            return start_response(code, headers, exc_info)
        start = time.perf_counter()
        body = self.app(environ, recording_start_response)
        took = time.perf_counter() - start
        self.requests.append((environ['REQUEST_METHOD'], path,
                              status[0] if status else 0, took))
        return body

    def reset(self):
        self.requests = []


def request_kind(method: str, path: str) -> str:
    """``GET /resource_providers/{uuid}/traits``: a request, ids hidden."""
    path = _UUID_RE.sub('{uuid}', path.partition('?')[0])
    path = re.sub(r'^/traits/[A-Z0-9_]+$', '/traits/{name}', path)
    path = re.sub(r'^/resource_classes/[A-Z0-9_]+$',
                  '/resource_classes/{name}', path)
    return '%s %s' % (method, path)


class Phase:
    """What one measured phase cost: Placement requests and time."""

    def __init__(self, requests: list, wall: float) -> None:
        self.requests = [(m, p, s) for m, p, s, _ in requests]
        self.placement = sum(t for _, _, _, t in requests)
        self.wall = wall

    @property
    def total(self) -> int:
        return len(self.requests)

    @property
    def gets(self) -> int:
        return sum(1 for m, _, _ in self.requests if m == 'GET')

    @property
    def writes(self) -> int:
        return sum(1 for m, _, _ in self.requests if m in WRITES)

    @property
    def errors(self) -> list:
        return [r for r in self.requests if r[2] >= 400]

    def kinds(self) -> collections.Counter:
        return collections.Counter(request_kind(m, p)
                                   for m, p, _ in self.requests)


def load_profile(profile) -> dict:
    """A normalised profile from a shipped name, a path or a dict."""
    if isinstance(profile, dict):
        return hosttree.normalise_profile(profile)
    if profile in hosttree.PROFILE_NAMES and not os.path.exists(profile):
        profile = hosttree.profile_path(profile)
    return hosttree.load_profile(profile)


def accelerators(root: str) -> list:
    """What cyborg-nova's default drivers find in the tree at ``root``."""
    conf = cfg.ConfigOpts()
    cn_conf.register_opts(conf)
    loader.register_opts(conf, list(loader.installed().values()))
    conf([], project='placement-traffic-benchmark')
    drivers = loader.load(conf, conf.cyborg_nova.enabled_drivers)
    return list(discovery.Discoverer(drivers, root).discover().accelerators)


def pci_devices(functions: list) -> list:
    """The host's PCI functions as libvirt hands them to Nova.

    The entries of ``get_available_resource()['pci_passthrough_devices']``:
    VFs are ``type-VF`` with their PF as ``parent_addr``, SR-IOV capable
    functions ``type-PF``, the rest ``type-PCI``. Bridges are left out.
    """
    devices = []
    for f in functions:
        if f['class'] >> 8 == _BRIDGE_CLASS:
            continue
        if f['physfn']:
            dev_type = 'type-VF'
        elif f['sriov'] and f['sriov']['totalvfs']:
            dev_type = 'type-PF'
        else:
            dev_type = 'type-PCI'
        address = f['address']
        devices.append({
            'dev_id': 'pci_' + re.sub('[:.]', '_', address),
            'address': address,
            'vendor_id': '%04x' % f['vendor'],
            'product_id': '%04x' % f['device'],
            'dev_type': dev_type,
            'parent_addr': f['physfn'],
            'numa_node': f['numa_node'] if f['numa_node'] >= 0 else None,
            'label': 'label_%04x_%04x' % (f['vendor'], f['device']),
        })
    return devices


def device_spec(accels: list, functions: list) -> list:
    """``[pci] device_spec`` entries for exactly the accelerators' units.

    Each accelerator's units (its VFs, or the function itself) are
    matched by vendor and product id and an address regex per PCI slot,
    tagged with the resource class and the traits cyborg-nova reports for
    that accelerator, so that both report the same providers.
    """
    by_address = {f['address']: f for f in functions}
    specs = []
    for accel in accels:
        slots = collections.defaultdict(list)
        for unit in accel.units:
            slot, _, func = unit.rpartition('.')
            slots[slot].append(func)
        for slot, funcs in sorted(slots.items()):
            domain, bus, dev = slot.split(':')
            ids = {(by_address['%s.%s' % (slot, fn)]['vendor'],
                    by_address['%s.%s' % (slot, fn)]['device'])
                   for fn in funcs}
            if len(ids) != 1:
                raise ValueError('%s: units of several products in slot %s'
                                 % (accel.address, slot))
            vendor, product = ids.pop()
            specs.append(json.dumps({
                'vendor_id': '%04x' % vendor,
                'product_id': '%04x' % product,
                'address': {'domain': domain, 'bus': bus, 'slot': dev,
                            'function': '[%s]' % ''.join(sorted(funcs))},
                'resource_class': accel.resource_class,
                'traits': ','.join(accel.traits),
            }, sort_keys=True))
    return specs


class TrafficScenario(integrated_helpers.ProviderUsageBaseTestCase):
    """One compute host through the four phases, one reporting mode."""

    def __init__(self, mode: str, profile, workdir: str, cycles: int = 5,
                 refreshes: int = 3) -> None:
        super().__init__('test_traffic')
        self.mode = mode
        self.compute_driver = DRIVERS[mode]
        self.profile = profile
        self.root = os.path.join(workdir, 'sys')
        self.state_path = os.path.join(workdir, 'state.sqlite')
        self.cycles = cycles
        self.refreshes = refreshes
        self.phases = {}
        self.tree = None
        self.device_spec = []

    def setUp(self):
        self.counter = None
        real_loadapp = deploy.loadapp

        def counting_loadapp(*args, **kwargs):
            self.counter = RequestCounter(real_loadapp(*args, **kwargs))
            return self.counter
        self.useFixture(fixtures.MonkeyPatch(
            'placement.deploy.loadapp', counting_loadapp))
        cn_conf.register_opts(CONF)
        loader.register_opts(CONF, list(loader.installed().values()))
        # The nova wheel installs api-paste.ini under <prefix>/etc/nova.
        self.flags(api_paste_config=os.path.join(
            sys.prefix, 'etc', 'nova', 'api-paste.ini'), group='wsgi')
        super().setUp()

    def _clear_attrs(self):
        # Keep the measurements for the caller after the run.
        pass

    def configure(self) -> None:
        if self.mode == CYBORG_NOVA:
            self.flags(sysfs_root=self.root, state_path=self.state_path,
                       auto_ready=True, group='cyborg_nova')
            return
        functions = hosttree.expand_functions(load_profile(self.profile))
        self.device_spec = device_spec(accelerators(self.root), functions)
        self.flags(report_in_placement=True, device_spec=self.device_spec,
                   group='pci')
        self.flags(pci_in_placement=True, group='filter_scheduler')
        devices = json.dumps(pci_devices(functions))
        real = nova_fake.MediumFakeDriver.get_available_resource

        def with_pci_devices(driver, nodename):
            resources = real(driver, nodename)
            if resources:
                resources['pci_passthrough_devices'] = devices
            return resources
        self.useFixture(fixtures.MonkeyPatch(
            'nova.virt.fake.MediumFakeDriver.get_available_resource',
            with_pci_devices))

    def measure(self, name: str, action) -> None:
        self.counter.reset()
        start = time.perf_counter()
        action()
        wall = time.perf_counter() - start
        self.phases.setdefault(name, []).append(
            Phase(self.counter.requests, wall))

    def cycle(self) -> None:
        compute = self.computes[HOST]
        ctx = nova_context.get_admin_context()
        with nova_context.target_cell(
                ctx, self.host_mappings[HOST].cell_mapping) as cctxt:
            compute.manager.update_available_resource(cctxt)

    def forced_refresh_cycle(self) -> None:
        # What happens every [compute]
        # resource_provider_association_refresh seconds (300 by default):
        # every cached provider is stale at once.
        client = self.computes[HOST].manager.rt.reportclient
        client._association_refresh_time.clear()
        self.cycle()

    def restart(self) -> None:
        # A new process in real life: a new driver, report client and
        # resource tracker, empty caches.
        self.computes[HOST] = self.restart_compute_service(
            self.computes[HOST], keep_hypervisor_state=False)

    def read_tree(self) -> list:
        """(class, total, reserved, custom traits) of each child."""
        return sidebyside.provider_tree(
            self, self._get_provider_uuid_by_host(HOST))

    def test_traffic(self):
        hosttree.build_tree(self.profile, self.root)
        self.configure()
        self.measure('register', lambda: self._start_compute(HOST))
        self.tree = self.read_tree()
        for _ in range(self.cycles):
            self.measure('cycle', self.cycle)
        for _ in range(self.refreshes):
            self.measure('refresh', self.forced_refresh_cycle)
        self.measure('restart', self.restart)
        self.measure('after_restart', self.cycle)


class ScenarioFailed(Exception):
    pass


def run_scenario(mode: str, profile, workdir: str, cycles: int = 5,
                 refreshes: int = 3) -> TrafficScenario:
    """Run one scenario in this process; the finished scenario."""
    scenario = TrafficScenario(mode, profile, workdir, cycles, refreshes)
    result = unittest.TestResult()
    scenario.run(result)
    if result.errors or result.failures:
        _, text = (result.errors + result.failures)[0]
        raise ScenarioFailed('%s on %s failed:\n%s'
                             % (mode, workdir, text))
    return scenario
