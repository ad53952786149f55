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

"""Nova's real LibvirtDriver on fakelibvirt, for side-by-side benchmarks.

One :class:`LibvirtHost` is one Nova functional test (Nova's
``ServersTestBase``): API, conductor, scheduler and a real Placement in
this process, and one compute on the real ``LibvirtDriver`` whose libvirt
is Nova's fakelibvirt. The host's PCI functions come from a host profile
and exist twice, as on a real host: as libvirt node devices (what Nova's
libvirt driver lists every update, whichever mode runs) and as a sysfs
tree (what cyborg-nova reads). The compute reports the accelerators
either way:

- ``cyborg-nova``: ``compute_driver = cyborg_nova.LibvirtDriver``,
  ``[cyborg_nova] sysfs_root`` the tree, ``auto_ready``, every bundled
  driver (``nic_sriov`` mapped to one physnet per NIC);
- ``nova-pci``: ``compute_driver = libvirt.LibvirtDriver`` with Nova's
  PCI passthrough in Placement: ``[pci] device_spec`` (see
  :func:`device_spec`), ``[pci] alias``, ``[pci] report_in_placement``,
  ``[filter_scheduler] pci_in_placement`` and the
  ``PciPassthroughFilter``.

CPU time is counted by :class:`CpuLedger`, per thread, along the call
stack: the project's overrides of Nova's driver methods, Nova's own
methods they wrap, Nova's PCI code and Placement (served in the calling
thread) each get their own share. Only what Nova's harness stubs for
every libvirt test is stubbed; nothing of cyborg-nova is.

Import ``nova.tests.functional`` (it sets Nova's concurrency mode) before
this module, and run Nova's harness in its own process.
"""

from __future__ import annotations

import collections
import contextlib
import cProfile
import functools
import importlib
import inspect
import json
import os
import pstats
import sys
import threading
import time
import unittest
from xml.etree import ElementTree

import fixtures
import nova.conf
from nova import context as nova_context
from nova.tests.fixtures import libvirt as fakelibvirt
from nova.tests.functional.libvirt import base as libvirt_base
from oslo_config import cfg
from placement import deploy
import sidebyside  # a sibling: the benchmarks run as scripts

from cyborg_drivers import discovery
from cyborg_drivers.fake import hosttree
from cyborg_drivers import loader
from cyborg_nova import conf as cn_conf
from tests import scrubhost

CONF = nova.conf.CONF
CYBORG_NOVA = 'cyborg-nova'
NOVA_PCI = 'nova-pci'
MODES = (CYBORG_NOVA, NOVA_PCI)
DRIVERS = {CYBORG_NOVA: 'cyborg_nova.LibvirtDriver',
           NOVA_PCI: 'libvirt.LibvirtDriver'}
#: cyborg-nova's bundled drivers (``nic_sriov`` configured per host).
ENABLED_DRIVERS = ['nvidia_gpu', 'intel_fpga', 'xilinx_fpga', 'intel_qat',
                   'nic_sriov']
HOST = 'compute1'
#: CPU categories of :class:`CpuLedger`.
PROJECT, NOVA, NOVA_PCI_CODE, LIBVIRT_PCI, PLACEMENT, OTHER = (
    'cyborg-nova', 'nova driver', 'nova pci', 'libvirt pci listing',
    'placement', 'other')
#: Nova's PCI code an update cycle runs (charged to NOVA_PCI_CODE).
NOVA_PCI_FUNCTIONS = (
    ('nova.compute.pci_placement_translator', None,
     'update_provider_tree_for_pci'),
    ('nova.pci.manager', 'PciDevTracker', 'save'),
    ('nova.pci.manager', 'PciDevTracker', 'clean_usage'),
    ('nova.pci.manager', 'PciDevTracker',
     'update_devices_from_hypervisor_resources'),
    ('nova.pci.manager', 'PciDevTracker', 'claim_instance'),
    ('nova.pci.stats', 'PciDeviceStats', 'to_device_pools_obj'),
)


# -- the host's PCI functions as libvirt node devices ------------------------

def _nodedev_name(address: str) -> str:
    return 'pci_' + address.replace(':', '_').replace('.', '_')


def _address_xml(address: str) -> str:
    domain, bus, rest = address.split(':')
    slot, function = rest.split('.')
    return ("<address domain='0x%s' bus='0x%s' slot='0x%s' "
            "function='0x%s'/>" % (domain, bus, slot, function))


class Nodedev:
    """One PCI function as fakelibvirt hands it to Nova's libvirt driver.

    The node device XML libvirt writes for a function (PCI domain, VF and
    PF capabilities, NUMA node), built from a profile's function rather
    than fakelibvirt's fixed layout, so that Nova sees the functions
    cyborg-nova reads from sysfs, at the same addresses.
    """

    is_capable_of_mdevs = False
    mac_address = None

    def __init__(self, function: dict, vfs: list[str]) -> None:
        self.address = function['address']
        domain, bus, rest = self.address.split(':')
        slot, func = rest.split('.')
        caps = ''
        if function['physfn']:
            caps = ("<capability type='phys_function'>%s</capability>"
                    % _address_xml(function['physfn']))
        elif function['sriov']:
            caps = ("<capability type='virt_functions' maxCount='%d'>%s"
                    "</capability>" % (function['sriov']['totalvfs'],
                                       ''.join(_address_xml(a)
                                               for a in vfs)))
        numa = function['numa_node']
        self.xml = (
            "<device><name>%(name)s</name>"
            "<path>/sys/devices/pci%(domain)s:00/%(address)s</path>"
            "<parent>%(parent)s</parent>"
            "<driver><name>%(driver)s</name></driver>"
            "<capability type='pci'><class>0x%(cls)06x</class>"
            "<domain>%(d)d</domain><bus>%(b)d</bus><slot>%(s)d</slot>"
            "<function>%(f)d</function>"
            "<product id='0x%(product)04x'/><vendor id='0x%(vendor)04x'/>"
            "%(caps)s<iommuGroup number='%(group)d'>%(addr_xml)s"
            "</iommuGroup>%(numa)s</capability></device>" % {
                'name': _nodedev_name(self.address), 'domain': domain,
                'address': self.address,
                'parent': (_nodedev_name(function['physfn'])
                           if function['physfn'] else 'computer'),
                'driver': function['driver'] or 'none',
                'cls': function['class'], 'd': int(domain, 16),
                'b': int(bus, 16), 's': int(slot, 16), 'f': int(func, 16),
                'product': function['device'], 'vendor': function['vendor'],
                'caps': caps, 'group': function.get('iommu_group') or 0,
                'addr_xml': _address_xml(self.address),
                'numa': "<numa node='%d'/>" % numa if numa >= 0 else ''})

    def XMLDesc(self, flags):  # noqa: N802 (libvirt's name)
        return self.xml


class HostDevices(fakelibvirt.HostPCIDevicesInfo):
    """fakelibvirt's PCI device pool holding a profile's functions."""

    def __init__(self, functions: list[dict]) -> None:
        super().__init__(num_pci=0, num_pfs=0, num_vfs=0)
        vfs = collections.defaultdict(list)
        for f in functions:
            if f['physfn']:
                vfs[f['physfn']].append(f['address'])
        self.devices = {_nodedev_name(f['address']): Nodedev(
            f, vfs[f['address']]) for f in functions}


# -- what each mode is configured with ---------------------------------------

def nic_mappings(functions: list[dict]) -> list[str]:
    """``[cyborg_nic_sriov] physical_device_mappings``: a physnet a NIC."""
    names = [f['net'][0] for f in functions if f.get('net')]
    return ['physnet%d:%s' % (i, name) for i, name in enumerate(names)]


def accelerators(root: str, functions: list[dict]) -> list:
    """What cyborg-nova's drivers (:data:`ENABLED_DRIVERS`) find."""
    conf = cfg.ConfigOpts()
    cn_conf.register_opts(conf)
    loader.register_opts(conf, list(loader.installed().values()))
    conf([], project='libvirt-benchmark')
    conf.set_override('physical_device_mappings', nic_mappings(functions),
                      group='cyborg_nic_sriov')
    drivers = loader.load(conf, ENABLED_DRIVERS)
    return list(discovery.Discoverer(drivers, root).discover().accelerators)


def device_spec(accels: list, functions: list[dict]) -> list[str]:
    """``[pci] device_spec`` for exactly the accelerators' units, compact.

    As an operator would write it: one entry per product where the
    product's functions are all units of accelerators with the same
    resource class and traits (QAT VFs, say). Where they are not (a GPU
    whose VFs have its PF's product id, NICs each with their own physnet
    trait), one entry per pattern of PCI slot and functions, with the
    buses sharing that pattern as one regex. Every entry carries the
    resource class and traits cyborg-nova reports for those units, so the
    two modes report the same inventory.
    """
    by_address = {f['address']: f for f in functions}
    groups = collections.defaultdict(set)
    for accel in accels:
        for unit in accel.units:
            f = by_address[unit]
            groups[(f['vendor'], f['device'], accel.resource_class,
                    tuple(accel.traits))].add(unit)
    product_units = collections.Counter()
    for f in functions:
        product_units[(f['vendor'], f['device'])] += 1
    specs = []
    for (vendor, product, rc, traits), units in sorted(groups.items()):
        base = {'vendor_id': '%04x' % vendor, 'product_id': '%04x' % product,
                'resource_class': rc, 'traits': ','.join(traits)}
        if product_units[(vendor, product)] == len(units):
            specs.append(json.dumps(base, sort_keys=True))
            continue
        # {(domain, bus): {slot: functions}} -> one entry per identical
        # layout of slots and functions, with its buses as a regex.
        layout = collections.defaultdict(lambda: collections.defaultdict(
            set))
        for unit in units:
            domain, bus, rest = unit.split(':')
            slot, fn = rest.split('.')
            layout[(domain, bus)][slot].add(fn)
        patterns = collections.defaultdict(list)
        for (domain, bus), slots in layout.items():
            by_funcs = collections.defaultdict(list)
            for slot, fns in slots.items():
                by_funcs[''.join(sorted(fns))].append(slot)
            for fns, slot_list in by_funcs.items():
                patterns[(domain, fns, tuple(sorted(slot_list)))].append(bus)
        for (domain, fns, slot_list), buses in sorted(patterns.items()):
            specs.append(json.dumps(dict(base, address={
                'domain': domain,
                'bus': '(%s)$' % '|'.join(sorted(buses)),
                'slot': '(%s)$' % '|'.join(slot_list),
                'function': '[%s]$' % fns}), sort_keys=True))
    return specs


# -- CPU time by who runs ----------------------------------------------------

class CpuLedger:
    """Thread CPU seconds by category, along each thread's call stack.

    :meth:`frame` charges the CPU time a thread spends inside it, minus
    the nested frames, to its category: a project override that calls
    Nova's method through ``super()`` is charged only for what it adds.
    :meth:`window` returns what one call cost, by category, in its
    thread. ``time.thread_time`` is per OS thread: Nova's native-thread
    mode (the benchmarks' default) keeps other threads' work out.
    """

    def __init__(self) -> None:
        self._local = threading.local()
        self._lock = threading.Lock()
        #: {name: [{category: seconds}]} of :meth:`recorded` calls.
        self.records = collections.defaultdict(list)

    def _state(self):
        s = self._local
        if not hasattr(s, 'stack'):
            s.stack, s.totals, s.mark = [], collections.Counter(), 0.0
            s.requests = 0
        return s

    def count_request(self) -> None:
        """One more Placement request served in this thread."""
        self._state().requests += 1

    def enter(self, category: str) -> None:
        s = self._state()
        now = time.thread_time()
        if s.stack:
            s.totals[s.stack[-1]] += now - s.mark
        s.stack.append(category)
        s.mark = now

    def leave(self) -> None:
        s = self._state()
        now = time.thread_time()
        s.totals[s.stack.pop()] += now - s.mark
        s.mark = now

    @contextlib.contextmanager
    def frame(self, category: str):
        self.enter(category)
        try:
            yield
        finally:
            self.leave()

    @contextlib.contextmanager
    def window(self, category: str = OTHER):
        """Yields a :class:`Spent`, filled on exit: what the block cost.

        Its items are {category: CPU seconds}, its ``requests`` the
        Placement requests served meanwhile in this thread.
        """
        s = self._state()
        outer = bool(s.stack)
        self.enter(category)
        before = collections.Counter(s.totals)
        requests = s.requests
        result = Spent()
        try:
            yield result
        finally:
            self.leave()
            spent = collections.Counter(s.totals)
            spent.subtract(before)
            result.update({k: v for k, v in spent.items() if v > 0})
            result.requests = s.requests - requests
            if not outer:
                s.totals.clear()

    def recorded(self, name: str, func, category: str = OTHER):
        """``func``, each call's :meth:`window` kept under ``name``.

        For work Nova runs in a thread of its own (each node's update,
        an instance build), whichever thread that is.
        """
        @functools.wraps(func)
        def keeping(*args, **kwargs):
            with self.window(category) as spent:
                result = func(*args, **kwargs)
            with self._lock:
                self.records[name].append(spent)
            return result
        return keeping

    def take(self, name: str) -> list[dict]:
        """The records under ``name`` so far, forgotten here."""
        with self._lock:
            return self.records.pop(name, [])


class Spent(dict):
    """{category: CPU seconds} of one window, and its Placement requests."""

    requests = 0


def _patch(test, owner, name: str, wrapper) -> None:
    """Replace ``owner.name`` until the test's cleanup."""
    had = name in vars(owner)
    old = vars(owner).get(name)
    setattr(owner, name, wrapper)
    if had:
        test.addCleanup(setattr, owner, name, old)
    else:
        test.addCleanup(delattr, owner, name)


def _charged(ledger: CpuLedger, category: str, func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with ledger.frame(category):
            return func(*args, **kwargs)
    return wrapper


def instrument(test, driver_cls, ledger: CpuLedger) -> list[str]:
    """Charge the driver's methods to the project or to Nova.

    Every method a cyborg-nova class in ``driver_cls``'s MRO defines that
    overrides one of Nova's driver (``spawn``, ``_get_guest_config``,
    ``update_provider_tree``...) is charged to :data:`PROJECT`, the Nova
    method it overrides to :data:`NOVA`; whatever the project hooks
    are called, they are found. Nova's PCI code and its libvirt PCI
    listing get their own categories. The overridden names, sorted.
    """
    ours = [c for c in driver_cls.__mro__
            if c.__module__.startswith('cyborg_nova')]
    nova_base = next(c for c in driver_cls.__mro__
                     if not c.__module__.startswith('cyborg_nova'))
    overridden = set()
    for cls in ours:
        for name, value in list(vars(cls).items()):
            # Plain methods only: a staticmethod wrapped so would get
            # ``self``.
            if (inspect.isfunction(value) and not name.startswith('__')
                    and hasattr(nova_base, name)):
                overridden.add(name)
                _patch(test, cls, name, _charged(ledger, PROJECT, value))
    for name in sorted(overridden | {'spawn', 'update_provider_tree'}):
        owner = next(c for c in nova_base.__mro__ if name in vars(c))
        _patch(test, owner, name, _charged(ledger, NOVA, vars(owner)[name]))
    from nova.virt.libvirt import driver as libvirt_driver
    owner = libvirt_driver.LibvirtDriver
    _patch(test, owner, '_get_pci_passthrough_devices', _charged(
        ledger, LIBVIRT_PCI, vars(owner)['_get_pci_passthrough_devices']))
    for module, cls, name in NOVA_PCI_FUNCTIONS:
        owner = importlib.import_module(module)
        if cls:
            owner = getattr(owner, cls)
        _patch(test, owner, name, _charged(ledger, NOVA_PCI_CODE,
                                           getattr(owner, name)))
    return sorted(overridden)


class PlacementCpu:
    """WSGI middleware: Placement's requests, charged to PLACEMENT.

    In Nova's harness Placement serves each request in the calling
    thread (wsgi-intercept), so its CPU would otherwise count as the
    caller's.
    """

    def __init__(self, app, ledger: CpuLedger) -> None:
        self.app = app
        self.ledger = ledger
        self.requests = 0

    def __call__(self, environ, start_response):
        self.requests += 1
        self.ledger.count_request()
        with self.ledger.frame(PLACEMENT):
            return list(self.app(environ, start_response))


# -- profiles -----------------------------------------------------------------

#: Where a function's file must be for it to count as the project's.
PROJECT_DIRS = (os.sep + 'cyborg_nova' + os.sep,
                os.sep + 'cyborg_drivers' + os.sep)
#: ... and as Nova's PCI code.
NOVA_PCI_DIRS = (os.sep.join(('', 'nova', 'pci', '')),
                 os.sep.join(('', 'nova', 'compute',
                              'pci_placement_translator.py')))


def _short(path: str) -> str:
    for marker in ('site-packages' + os.sep,) + PROJECT_DIRS:
        if marker in path:
            rest = path.split(marker, 1)[1]
            if marker in PROJECT_DIRS:
                rest = marker.strip(os.sep) + '/' + rest
            return rest
    return os.path.basename(path)


def top_functions(profile: cProfile.Profile, dirs=None, by: str = 'cum',
                  limit: int = 8) -> list[tuple]:
    """(function, calls, own ms, cumulative ms) of the profile's top.

    ``dirs``: only functions whose file is under one of these (the
    project's, Nova's PCI code); ``by``: ``cum`` (cumulative time, what
    the function and what it calls took) or ``own``.
    """
    rows = []
    for (path, line, name), (_, calls, tt, ct, _) in pstats.Stats(
            profile).stats.items():
        if dirs is not None and not any(d in path for d in dirs):
            continue
        if name.startswith('<') and dirs is None:
            continue
        rows.append(('%s:%d(%s)' % (_short(path), line, name), calls,
                     1000.0 * tt, 1000.0 * ct))
    rows.sort(key=lambda r: -(r[3] if by == 'cum' else r[2]))
    return rows[:limit]


# -- the host ----------------------------------------------------------------

class LibvirtHost(libvirt_base.ServersTestBase):
    """One compute on the real LibvirtDriver, reporting one way."""

    microversion = 'latest'
    ADMIN_API = True

    def __init__(self, mode: str, profile: dict, workdir: str,
                 body) -> None:
        super().__init__('test_body')
        self.mode = mode
        self.profile = profile
        self.workdir = workdir
        self.root = os.path.join(workdir, 'sys')
        self.body = body
        self.ledger = CpuLedger()
        self.device_spec = []
        self.overridden = []
        self.result = None
        if mode == NOVA_PCI:
            self.ADDITIONAL_FILTERS = ['PciPassthroughFilter']

    def setUp(self):
        real_loadapp = deploy.loadapp
        self.placement_cpu = None

        def loadapp(*args, **kwargs):
            self.placement_cpu = PlacementCpu(
                real_loadapp(*args, **kwargs), self.ledger)
            return self.placement_cpu
        self.useFixture(fixtures.MonkeyPatch('placement.deploy.loadapp',
                                             loadapp))
        cn_conf.register_opts(CONF)
        loader.register_opts(CONF, list(loader.installed().values()))
        # The nova wheel installs api-paste.ini under <prefix>/etc/nova.
        self.flags(api_paste_config=os.path.join(
            sys.prefix, 'etc', 'nova', 'api-paste.ini'), group='wsgi')
        if self.mode == CYBORG_NOVA:
            # A deleted server's VFs are reset before reuse, in
            # nova-compute's background thread; the harness refuses the
            # privsep daemon, so the reset runs on the tree here.
            self.useFixture(scrubhost.ScrubKernel())
        super().setUp()

    def _setup_compute_service(self):
        self.flags(compute_driver=DRIVERS[self.mode])

    def _clear_attrs(self):
        # Keep the measurements for the caller after the run.
        pass

    def configure(self) -> None:
        self.functions = hosttree.expand_functions(self.profile)
        hosttree.build_tree(self.profile, self.root)
        if self.mode == CYBORG_NOVA:
            self.flags(sysfs_root=self.root,
                       state_path=os.path.join(self.workdir, 'state.sqlite'),
                       enabled_drivers=ENABLED_DRIVERS, auto_ready=True,
                       group='cyborg_nova')
            self.flags(physical_device_mappings=nic_mappings(
                self.functions), group='cyborg_nic_sriov')
            return
        self.device_spec = device_spec(
            accelerators(self.root, self.functions), self.functions)
        self.flags(report_in_placement=True, device_spec=self.device_spec,
                   group='pci')
        self.flags(pci_in_placement=True, group='filter_scheduler')

    def start_host(self) -> None:
        """Start the compute: its first registration."""
        from nova.virt.libvirt import driver as libvirt_driver
        if self.mode == CYBORG_NOVA:
            from cyborg_nova.virt import libvirt as cn_libvirt
            driver_cls = cn_libvirt.LibvirtDriver
        else:
            driver_cls = libvirt_driver.LibvirtDriver
        self.overridden = instrument(self, driver_cls, self.ledger)
        self._watch(driver_cls)
        self.start_compute(hostname=HOST,
                           pci_info=HostDevices(self.functions))

    def _watch(self, driver_cls) -> None:
        """Record, time-stamp and (on request) profile Nova's work units.

        The per-node update and the instance build run in threads of
        Nova's pools: each call's CPU is recorded in the thread that runs
        it (:meth:`CpuLedger.recorded`), an instance's build and spawn
        are time-stamped by instance, and ``self.profilers[name]``, when
        set, profiles the next call in its thread.
        """
        from nova.compute import manager
        from nova.objects import instance as instance_obj
        #: {instance uuid: {event: perf_counter}}.
        self.stamps = collections.defaultdict(dict)
        self.profilers = {}
        self.active = {}
        #: Every domain XML the driver defined, in order.
        self.xmls = []
        real_define = fakelibvirt.Connection.defineXML

        def define(conn, xml):
            self.xmls.append(xml)
            return real_define(conn, xml)
        _patch(self, fakelibvirt.Connection, 'defineXML', define)

        def watched(name, func):
            recorded = self.ledger.recorded(name, func)

            @functools.wraps(func)
            def wrapper(*args, **kwargs):
                # RPC calls pass the instance by keyword.
                uuid = next((getattr(a, 'uuid') for a in
                             args + tuple(kwargs.values())
                             if isinstance(a, instance_obj.Instance)), None)
                stamps = self.stamps[uuid]
                stamps[name + ' start'] = time.perf_counter()
                profiler = self.profilers.pop(name, None)
                if profiler is not None:
                    profiler.enable()
                try:
                    return recorded(*args, **kwargs)
                finally:
                    if profiler is not None:
                        profiler.disable()
                    stamps[name + ' end'] = time.perf_counter()
            return wrapper
        owner = manager.ComputeManager
        for name in ('_update_available_resource_for_node',
                     '_build_and_run_instance', 'terminate_instance'):
            _patch(self, owner, name, watched(name, vars(owner)[name]))
        _patch(self, driver_cls, 'spawn', watched(
            'spawn', getattr(driver_cls, 'spawn')))
        real_save = vars(instance_obj.Instance)['save']

        @functools.wraps(real_save)
        def save(inst, *args, **kwargs):
            result = real_save(inst, *args, **kwargs)
            if (inst.obj_attr_is_set('vm_state')
                    and inst.vm_state == 'active'):
                event = self.active.setdefault(inst.uuid, threading.Event())
                if not event.is_set():
                    self.stamps[inst.uuid]['active'] = time.perf_counter()
                    event.set()
            return result
        _patch(self, instance_obj.Instance, 'save', save)

    def spawn(self, flavor_id: str, timeout: float = 120) -> dict:
        """Build one server; when each step of it happened, and its CPU.

        ``posted`` is taken before ``POST /servers``, ``active`` when the
        compute has saved the instance ACTIVE (what the API then shows;
        the harness's own wait polls every 0.5 s, too coarse for this).
        """
        body = self._build_server(flavor_id=flavor_id, networks='none')
        posted = time.perf_counter()
        server = self.api.post_server({'server': body})
        event = self.active.setdefault(server['id'], threading.Event())
        if not event.wait(timeout):
            self.fail('server %s not ACTIVE in %d s' % (server['id'],
                                                        timeout))
        self._wait_for_state_change(server, 'ACTIVE')
        # The compute saves the instance ACTIVE inside the build: wait
        # for the build to return, and so to be recorded.
        deadline = time.monotonic() + timeout
        while '_build_and_run_instance end' not in self.stamps[server['id']]:
            if time.monotonic() > deadline:
                self.fail('build of %s did not return' % server['id'])
            time.sleep(0.005)
        stamps = dict(self.stamps.pop(server['id']))
        stamps['posted'] = posted
        self.ledger.take('terminate_instance')
        return {'server': server, 'stamps': stamps,
                'hostdevs': hostdevs(self.xmls[-1]) if self.xmls else [],
                'spawn': self.ledger.take('spawn'),
                'build': self.ledger.take('_build_and_run_instance')}

    def delete(self, server: dict, timeout: float = 120) -> None:
        """Delete a server and wait until the compute is done with it.

        The API answers 404 once the instance is destroyed, before the
        compute's resource tracker has updated for the delete: the next
        build would overlap that update.
        """
        self.api.delete_server(server['id'])
        deadline = time.monotonic() + timeout
        while 'terminate_instance end' not in self.stamps[server['id']]:
            if time.monotonic() > deadline:
                self.fail('delete of %s did not finish' % server['id'])
            time.sleep(0.005)
        self.stamps.pop(server['id'])
        self._wait_until_deleted(server)
        self.ledger.take('terminate_instance')

    def read_tree(self) -> list:
        """(class, total, reserved, custom traits) of each child provider."""
        return sidebyside.provider_tree(self, self.compute_rp_uuids[HOST])

    def cycle(self) -> None:
        """One ``update_available_resource``, as the periodic runs it."""
        compute = self.computes[HOST]
        ctx = nova_context.get_admin_context()
        compute.manager.update_available_resource(ctx)

    def test_body(self):
        self.configure()
        self.result = self.body(self)


def hostdevs(xml: str) -> list[str]:
    """The PCI addresses of a domain XML's ``<hostdev>`` elements."""
    found = []
    for dev in ElementTree.fromstring(xml).iter('hostdev'):
        addr = dev.find('source/address')
        if addr is not None:
            found.append('%04x:%02x:%02x.%x' % tuple(
                int(addr.get(k), 16)
                for k in ('domain', 'bus', 'slot', 'function')))
    return sorted(found)


def source_state() -> str:
    """The commit measured, and whether cyborg-nova's code had changes.

    The spawn hooks change as the project does: a result names the code
    it measured, so that a later run can be compared with it.
    """
    import subprocess
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        head = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'],
                              cwd=top, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(['git', 'status', '--porcelain', '--',
                                'cyborg_nova', 'cyborg_drivers'], cwd=top,
                               capture_output=True, text=True,
                               check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return 'not a git checkout'
    return 'commit %s%s' % (head, ', with uncommitted changes to '
                            'cyborg_nova/cyborg_drivers' if dirty else '')


class ScenarioFailed(Exception):
    pass


def run(mode: str, profile: dict, workdir: str, body):
    """Run ``body(host)`` on a fresh host in ``mode``; what it returned."""
    os.makedirs(workdir, exist_ok=True)
    host = LibvirtHost(mode, profile, workdir, body)
    result = unittest.TestResult()
    host.run(result)
    if result.errors or result.failures:
        _, text = (result.errors + result.failures)[0]
        raise ScenarioFailed('%s on %s failed:\n%s' % (mode, workdir, text))
    return host.result
