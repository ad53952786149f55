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

"""Placement at cloud scale: registration and allocation candidates.

Two measurements against a real Placement (openstack-placement 16 served
by gunicorn from ``.venv-placement``, see ``tools/setup-bench-venvs.sh``):

1. **Registration.** N simulated computes, each with 10 accelerators of
   mixed kinds (:func:`scale_profile`: 2 QAT 4xxx x 16 VFs, 2 E810 x 16
   VFs, 2 A100 x 16 VFs, 2 T4, 2 PAC), register through the HTTP API as
   nova-compute does it: each host runs the resource tracker's
   ``_update_to_placement`` sequence with Nova's own
   ``SchedulerReportClient`` and ``ProviderTree`` and cyborg-nova's
   ``ProviderTreeUpdater`` over a fake sysfs tree (as
   ``tools/report_host.py``), several hosts at once from a few client
   processes. Placement on SQLite (gunicorn, one worker, one thread: more
   gives ``database is locked``) and on PostgreSQL 15 (Debian's, started
   here on loopback; several workers). Requests are counted at the server
   (gunicorn's access log).

2. **Allocation candidates.** ``GET /allocation_candidates`` latency
   (median, p95; one client, requests in sequence) for typical
   accelerator flavors, the query strings built by Nova 34's own
   ``ResourceRequest`` from flavors with extra specs (plus the
   ``root_required=!COMPUTE_STATUS_DISABLED`` Nova's scheduler adds), at
   1,000 and 5,000 hosts, for two shapes of the same accelerators:

   - ``per-PF`` (this project): one child provider per accelerator, VFs
     as its inventory: 10 children a host;
   - ``per-VF`` (the shape upstream Cyborg's NIC and QAT drivers
     produce): one provider per QAT and NIC VF (inventory 1), the others
     as per-PF: 70 children a host;

   each with Placement's wide-tree setting off (the defaults:
   ``[placement] max_allocation_candidates = -1``,
   ``allocation_candidates_generation_strategy = depth-first``) and on
   (``max_allocation_candidates = 1000``, ``breadth-first``). These
   databases are filled in bulk: rows written straight into Placement's
   tables (its own SQLAlchemy models, ``placement.db.sqlalchemy.models``)
   by :func:`bulk_fill`, the provider trees being exactly what the HTTP
   registration produces (checked: one host's tree read back through the
   API is compared with a host registered through HTTP).

Writes ``benchmarks/results/scale.md`` and ``scale.json``.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid

os.environ.setdefault('OS_NOVA_DISABLE_EVENTLET_PATCHING', '1')

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
if REPO_ROOT not in sys.path:
    sys.path.insert(1, REPO_ROOT)
from tests import dbservers  # noqa: E402
PLACEMENT_VENV = os.path.join(REPO_ROOT, '.venv-placement')
#: Root provider uuids: as tools/report_host.py derives them.
ROOT_NAMESPACE = uuid.UUID('2b4c6c1e-8d7a-4f0e-9a55-7d1f6d7e2c11')
#: What the resource tracker reports for the host itself.
ROOT_INVENTORY = {
    'VCPU': {'total': 64, 'allocation_ratio': 4.0, 'max_unit': 64},
    'MEMORY_MB': {'total': 262144, 'reserved': 4096, 'max_unit': 262144},
    'DISK_GB': {'total': 2000, 'max_unit': 2000},
}
ROOT_TRAITS = ['COMPUTE_NODE', 'OWNER_NOVA']
INVENTORY_DEFAULTS = {'reserved': 0, 'min_unit': 1, 'step_size': 1,
                      'allocation_ratio': 1.0}
#: Classes upstream Cyborg reports one provider per VF for (NIC, QAT).
SPLIT_CLASSES = ('CUSTOM_QAT', 'CUSTOM_NIC')
SCALE_DRIVERS = ['nvidia_gpu', 'intel_fpga', 'intel_qat', 'nic_sriov']
PER_PF, PER_VF = 'per-PF', 'per-VF'
SHAPES = (PER_PF, PER_VF)
WIDE_OFF, WIDE_ON = 'off', 'on'
WIDE_SETTINGS = {
    WIDE_OFF: {},
    WIDE_ON: {'max_allocation_candidates': '1000',
              'allocation_candidates_generation_strategy': 'breadth-first'},
}
#: Flavors: name -> (extra specs). Every flavor: 2 VCPU, 4 GiB, 20 GB.
FLAVORS = collections.OrderedDict([
    ('1 QAT VF', {'resources:CUSTOM_QAT': '1'}),
    ('1 NIC VF on physnet0', {'resources1:CUSTOM_NIC': '1',
                              'trait1:CUSTOM_PHYSNET0': 'required',
                              'group_policy': 'none'}),
    ('1 QAT VF + 1 NIC VF', {'resources1:CUSTOM_QAT': '1',
                             'resources2:CUSTOM_NIC': '1',
                             'group_policy': 'none'}),
    ('1 T4 (PGPU, not split: control)', {'resources:PGPU': '1'}),
])
ACCESS_FORMAT = '%(m)s %(U)s %(s)s %(L)s'


def nodename(i: int) -> str:
    return 'compute-%05d' % i


def root_uuid(name: str) -> str:
    return str(uuid.uuid5(ROOT_NAMESPACE, name))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def log(msg: str) -> None:
    print('[%s] %s' % (time.strftime('%H:%M:%S'), msg), file=sys.stderr,
          flush=True)


# -- HTTP -----------------------------------------------------------------

def http(url: str, method: str = 'GET', body=None, version: str = '1.39',
         timeout: float = 60.0):
    """(status, parsed JSON or None, seconds) of one request."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={
        'X-Auth-Token': 'admin', 'Accept': 'application/json',
        'Content-Type': 'application/json',
        'OpenStack-API-Version': 'placement %s' % version})
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            status = resp.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    took = time.perf_counter() - start
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        parsed = None
    return status, parsed, took


# -- PostgreSQL ------------------------------------------------------------

class Postgres(dbservers.PostgreSQL):
    """A throw-away PostgreSQL 15 instance on loopback, as user postgres.

    The tests' private server (tests/dbservers.py), with the benchmarks'
    settings: durable unless a database is created otherwise.
    """

    settings = '-c max_connections=300 -c shared_buffers=512MB'

    @classmethod
    def available(cls) -> bool:
        return cls.unavailable() is None

    def create_db(self, name: str, durable: bool = False) -> str:
        url = super().create_db(name)
        if not durable:
            # Commits are not waited for on disk (as sqlite_synchronous =
            # False for SQLite): the comparison is about the engines and
            # their workers, not this machine's disk flush latency.
            self.execute('ALTER DATABASE %s SET synchronous_commit = off'
                         % name)
        return url

    def version(self) -> str:
        return self.server_version


# -- Placement server --------------------------------------------------------

class Placement:
    """openstack-placement under gunicorn from .venv-placement."""

    def __init__(self, workdir: str, name: str, db_url: str, workers: int,
                 options: dict | None = None, timeout: int = 300,
                 durable: bool = False) -> None:
        self.dir = os.path.join(workdir, 'placement-' + name)
        os.makedirs(self.dir, exist_ok=True)
        self.db_url = db_url
        self.workers = workers
        self.options = options or {}
        self.timeout = timeout
        self.durable = durable
        self.port = None
        self.proc = None
        self.access_log = os.path.join(self.dir, 'access.log')
        self.conf = os.path.join(self.dir, 'placement.conf')

    @staticmethod
    def available() -> bool:
        return os.path.exists(os.path.join(PLACEMENT_VENV, 'bin',
                                           'gunicorn'))

    @property
    def url(self) -> str:
        return 'http://127.0.0.1:%d' % self.port

    def write_config(self) -> None:
        lines = ['[DEFAULT]', 'debug = False', 'log_file = %s'
                 % os.path.join(self.dir, 'placement.log'),
                 '[api]', 'auth_strategy = noauth2',
                 '[placement_database]', 'connection = %s' % self.db_url,
                 'sync_on_startup = False']
        if self.db_url.startswith('sqlite') and not self.durable:
            # No flush to disk on commit (PRAGMA synchronous = OFF), as
            # PostgreSQL's synchronous_commit = off below.
            lines.append('sqlite_synchronous = False')
        lines.append('[placement]')
        lines += ['%s = %s' % kv for kv in sorted(self.options.items())]
        with open(self.conf, 'w') as f:
            f.write('\n'.join(lines) + '\n')

    def sync(self) -> None:
        self.write_config()
        subprocess.run([os.path.join(PLACEMENT_VENV, 'bin',
                                     'placement-manage'),
                        '--config-file', self.conf, 'db', 'sync'],
                       check=True, capture_output=True)

    def start(self, options: dict | None = None) -> None:
        if options is not None:
            self.options = options
        self.write_config()
        self.port = free_port()
        env = dict(os.environ, OS_PLACEMENT_CONFIG_DIR=self.dir)
        self.proc = subprocess.Popen(
            [os.path.join(PLACEMENT_VENV, 'bin', 'gunicorn'),
             '--workers', str(self.workers), '--threads', '1',
             '--bind', '127.0.0.1:%d' % self.port,
             '--timeout', str(self.timeout), '--backlog', '2048',
             '--access-logfile', self.access_log,
             '--access-logformat', ACCESS_FORMAT,
             '--error-logfile', os.path.join(self.dir, 'gunicorn.log'),
             'placement.wsgi.api:application'],
            env=env, cwd=self.dir, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError('Placement exited, see %s' % self.dir)
            try:
                if http(self.url + '/', timeout=5)[0] == 200:
                    # Every worker imports the app on its own; wait until
                    # all have answered once or the master says so.
                    self._wait_workers()
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError('Placement did not start, see %s' % self.dir)

    def _wait_workers(self) -> None:
        deadline = time.time() + 60
        while time.time() < deadline and len(self.worker_pids()) < \
                self.workers:
            time.sleep(0.2)
        # Warm every worker (import and first DB connection).
        for _ in range(self.workers * 3):
            http(self.url + '/resource_providers?name=warm-up')

    def worker_pids(self) -> list[int]:
        pids = []
        for entry in os.listdir('/proc'):
            if entry.isdigit():
                try:
                    with open('/proc/%s/stat' % entry) as f:
                        fields = f.read().rsplit(')', 1)[1].split()
                except OSError:
                    continue
                if int(fields[1]) == self.proc.pid:
                    pids.append(int(entry))
        return pids

    def cpu_seconds(self) -> float:
        """CPU time used so far by the master and its workers."""
        total = 0.0
        for pid in [self.proc.pid] + self.worker_pids():
            try:
                with open('/proc/%d/stat' % pid) as f:
                    fields = f.read().rsplit(')', 1)[1].split()
                total += int(fields[11]) + int(fields[12])
            except OSError:
                pass
        return total / os.sysconf('SC_CLK_TCK')

    def mark(self) -> int:
        try:
            return os.path.getsize(self.access_log)
        except OSError:
            return 0

    def requests_since(self, mark: int) -> list[tuple]:
        """(method, path, status, seconds) served since ``mark``."""
        time.sleep(0.2)  # the last lines of the access log
        return self.requests_between(mark, None)

    def requests_between(self, mark: int, end) -> list[tuple]:
        """(method, path, status, seconds) logged from ``mark`` to ``end``.

        Marks are sizes of the access log; only whole lines count.
        """
        out = []
        with open(self.access_log, 'rb') as f:
            f.seek(mark)
            data = f.read(-1 if end is None else end - mark)
            if end is not None:
                data = data[:data.rfind(b'\n') + 1]
            for line in data.decode(errors='replace').splitlines():
                parts = line.split()
                if len(parts) == 4:
                    out.append((parts[0], parts[1], int(parts[2]),
                                float(parts[3])))
        return out

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def ensure_custom(self, spec: dict) -> None:
        """Create the spec's custom resource classes and traits."""
        for rc in spec['custom_classes']:
            http(self.url + '/resource_classes/%s' % rc, 'PUT')
        for trait in spec['custom_traits']:
            http(self.url + '/traits/%s' % trait, 'PUT')


def placement_version() -> str:
    out = subprocess.run(
        [os.path.join(PLACEMENT_VENV, 'bin', 'python'), '-c',
         'import importlib.metadata as m; print(m.version('
         '"openstack-placement"), m.version("gunicorn"), '
         'm.version("SQLAlchemy"))'],
        capture_output=True, text=True, check=True).stdout.split()
    return out


# -- the simulated host ------------------------------------------------------

def scale_profile() -> dict:
    """One compute: 10 accelerators of five kinds, 100 assignable units."""
    from cyborg_drivers.fake import hosttree
    devices = list(hosttree.synthetic_profile(
        accelerator_pfs=0, noise=10)['devices'])
    plan = [('qat', 2), ('e810', 2), ('a100', 2), ('t4', 2), ('pac', 2)]
    bus, n = 0x20, 0
    for kind, count in plan:
        for _ in range(count):
            addr = '0000:%02x:00.0' % bus
            numa = n % 2
            base = {'address': addr, 'numa_node': numa}
            if kind == 'qat':
                dev = dict(base, vendor=0x8086, device=0x4940,
                           **{'class': 0x0b4000}, driver='4xxx',
                           sriov={'totalvfs': 16, 'numvfs': 16,
                                  'vf_device': 0x4941},
                           qat={'cfg_services': 'sym;asym', 'state': 'up'})
            elif kind == 'e810':
                dev = dict(base, vendor=0x8086, device=0x1592,
                           **{'class': 0x020000}, driver='ice',
                           sriov={'totalvfs': 128, 'numvfs': 16,
                                  'vf_device': 0x1889, 'vf_driver': 'iavf'},
                           net=['ens%df0' % n])
            elif kind == 'a100':
                dev = dict(base, vendor=0x10de, device=0x20b0,
                           **{'class': 0x030200}, driver='nvidia',
                           sriov={'totalvfs': 16, 'numvfs': 16,
                                  'vf_device': 0x20b0,
                                  'vf_driver': 'nvidia'})
            elif kind == 't4':
                dev = dict(base, vendor=0x10de, device=0x1eb8,
                           **{'class': 0x030200}, driver='nvidia')
            else:
                dev = dict(base, vendor=0x8086, device=0x09c4,
                           **{'class': 0x120000}, driver='intel-fpga-pci',
                           sriov={'totalvfs': 1, 'numvfs': 1,
                                  'vf_device': 0x09c5,
                                  'vf_driver': 'intel-fpga-pci'},
                           fpga={'layout': 'opae',
                                 'interface_id':
                                     '9346116d-a52d-5ca8-b06a-a9a389ef7c8d',
                                 'afu_id':
                                     'd8424dc4-a4a3-c413-f89e-433683f9040b'})
            devices.append(dev)
            bus += 1
            n += 1
    return hosttree.normalise_profile({
        'name': 'scale-host',
        'description': 'scale benchmark compute: 2 QAT 4xxx x 16 VFs, '
                       '2 E810 x 16 VFs, 2 A100 x 16 VFs, 2 T4, 2 PAC',
        'devices': devices})


def build_host_tree(workdir: str) -> tuple[str, list[str]]:
    """The simulated host's sysfs tree (shared by all hosts) and NICs."""
    from cyborg_drivers.fake import hosttree
    profile = scale_profile()
    root = os.path.join(workdir, 'sys')
    if not os.path.exists(root):
        hosttree.build_tree(profile, root)
    return root, [d['net'][0] for d in profile['devices'] if d.get('net')]


def make_updater(sysfs_root: str, nics: list[str], state_path: str,
                 allocations_for=None):
    """cyborg-nova's ProviderTreeUpdater as nova-compute builds it."""
    from oslo_config import cfg

    from cyborg_drivers import discovery
    from cyborg_drivers import loader
    from cyborg_nova import providers
    from cyborg_nova import store as state_store

    conf = cfg.ConfigOpts()
    conf([])
    drivers = loader.load(conf, SCALE_DRIVERS)
    conf.set_override('physical_device_mappings',
                      ['physnet%d:%s' % (i, n) for i, n in enumerate(nics)],
                      group='cyborg_nic_sriov')
    return providers.ProviderTreeUpdater(
        discovery.Discoverer(drivers, sysfs_root),
        state_store.StateStore(state_path),
        allocations_for or (lambda rp: {}), auto_ready=True)


def host_spec(workdir: str) -> dict:
    """The per-PF tree cyborg-nova reports for the simulated host.

    Computed by running ProviderTreeUpdater on a Nova ProviderTree; with
    the VF addresses of every accelerator, so the per-VF shape can be
    derived from it.
    """
    from nova.compute import provider_tree

    from cyborg_nova import providers

    sysfs_root, nics = build_host_tree(workdir)
    updater = make_updater(sysfs_root, nics,
                           os.path.join(workdir, 'spec-state.sqlite'))
    node = 'spec-host'
    tree = provider_tree.ProviderTree()
    tree.new_root(node, root_uuid(node))
    updater.update(tree, node)
    units = {a.address: list(a.units)
             for a in updater.discoverer.discover().accelerators}
    children = []
    for rp in sorted(tree.get_provider_uuids(node)):
        data = tree.data(rp)
        if data.name == node:
            continue
        address = data.name.split(providers.NAME_INFIX, 1)[1]
        inventory = {rc: dict(INVENTORY_DEFAULTS, **inv)
                     for rc, inv in data.inventory.items()}
        children.append({'address': address, 'units': units[address],
                         'inventory': inventory,
                         'traits': sorted(data.traits)})
    children.sort(key=lambda c: c['address'])
    classes = sorted({rc for c in children for rc in c['inventory']
                      if rc.startswith('CUSTOM_')})
    traits = sorted({t for c in children for t in c['traits']
                     if t.startswith('CUSTOM_')})
    return {'sysfs_root': sysfs_root, 'nics': nics,
            'root': {'inventory': {rc: dict(INVENTORY_DEFAULTS, **inv)
                                   for rc, inv in ROOT_INVENTORY.items()},
                     'traits': ROOT_TRAITS},
            'children': children, 'custom_classes': classes,
            'custom_traits': traits}


def shape_children(spec: dict, shape: str) -> list[dict]:
    """The child providers of one host (address, inventory, traits)."""
    if shape == PER_PF:
        return spec['children']
    out = []
    for child in spec['children']:
        (rc, inv), = child['inventory'].items()
        if rc in SPLIT_CLASSES and child['units'] != [child['address']]:
            for unit in child['units']:
                out.append({'address': unit, 'traits': child['traits'],
                            'inventory': {rc: dict(inv, total=1, max_unit=1,
                                                   reserved=0)}})
        else:
            out.append(child)
    return out


# -- bulk fill (runs in .venv-placement) -------------------------------------

def bulk_fill(db_url: str, spec: dict, shape: str, first: int,
              last: int) -> dict:
    """Write hosts [first, last) of ``shape`` straight into Placement's DB.

    Rows of ``resource_providers``, ``inventories`` and
    ``resource_provider_traits`` (Placement's own SQLAlchemy models), the
    same providers (names, uuids, parents), inventories and traits the
    HTTP registration creates. Custom classes and traits must exist.
    """
    from placement.db.sqlalchemy import models
    import sqlalchemy as sa

    sys.path.insert(0, REPO_ROOT)
    from cyborg_drivers import device as device_model

    engine = sa.create_engine(db_url)
    rps = models.ResourceProvider.__table__
    invs = models.Inventory.__table__
    rp_traits = models.ResourceProviderTrait.__table__
    children = shape_children(spec, shape)
    start = time.perf_counter()
    counts = collections.Counter()
    with engine.begin() as conn:
        rc_ids = dict((name, id_) for id_, name in conn.execute(
            sa.text('SELECT id, name FROM resource_classes')))
        trait_ids = dict((name, id_) for id_, name in conn.execute(
            sa.text('SELECT id, name FROM traits')))
        next_id = conn.execute(sa.text(
            'SELECT COALESCE(MAX(id), 0) FROM resource_providers')
        ).scalar() + 1
        now = time.strftime('%Y-%m-%d %H:%M:%S')
        chunk = max(1, 20000 // (len(children) + 1))
        for lo in range(first, last, chunk):
            rp_rows, inv_rows, trait_rows = [], [], []
            for i in range(lo, min(last, lo + chunk)):
                node = nodename(i)
                root_id = next_id
                next_id += 1
                providers = [(root_id, root_uuid(node), node, None,
                              spec['root'])]
                for child in children:
                    providers.append((
                        next_id, device_model.device_uuid(
                            node, child['address']),
                        '%s_accelerator_%s' % (node, child['address']),
                        root_id, child))
                    next_id += 1
                for id_, uuid_, name, parent, body in providers:
                    rp_rows.append({
                        'id': id_, 'uuid': uuid_, 'name': name,
                        'generation': 1, 'root_provider_id': root_id,
                        'parent_provider_id': parent, 'created_at': now,
                        'updated_at': now})
                    for rc, inv in body['inventory'].items():
                        inv_rows.append(dict(
                            resource_provider_id=id_,
                            resource_class_id=rc_ids[rc],
                            total=inv['total'], reserved=inv['reserved'],
                            min_unit=inv['min_unit'],
                            max_unit=inv['max_unit'],
                            step_size=inv['step_size'],
                            allocation_ratio=inv['allocation_ratio'],
                            created_at=now, updated_at=now))
                    for trait in body['traits']:
                        trait_rows.append({'trait_id': trait_ids[trait],
                                           'resource_provider_id': id_,
                                           'created_at': now,
                                           'updated_at': now})
            conn.execute(rps.insert(), rp_rows)
            conn.execute(invs.insert(), inv_rows)
            conn.execute(rp_traits.insert(), trait_rows)
            counts.update(providers=len(rp_rows), inventories=len(inv_rows),
                          traits=len(trait_rows))
        if engine.dialect.name == 'postgresql':
            conn.execute(sa.text(
                "SELECT setval(pg_get_serial_sequence('resource_providers', "
                "'id'), (SELECT MAX(id) FROM resource_providers))"))
    if engine.dialect.name == 'postgresql':
        with engine.connect() as conn:
            conn.execution_options(isolation_level='AUTOCOMMIT').execute(
                sa.text('VACUUM ANALYZE'))
    counts['seconds'] = time.perf_counter() - start
    return dict(counts)


def run_bulk_fill(db_url: str, spec_path: str, shape: str, first: int,
                  last: int) -> dict:
    out = subprocess.run(
        [os.path.join(PLACEMENT_VENV, 'bin', 'python'), __file__, '_fill',
         '--db', db_url, '--spec', spec_path, '--shape', shape,
         '--first', str(first), '--last', str(last)],
        capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError('bulk fill failed:\n' + out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- the host's update, as nova-compute's resource tracker runs it ------------

def report_client(url: str):
    from keystoneauth1 import adapter
    from keystoneauth1 import session
    from keystoneauth1 import token_endpoint
    from nova.scheduler.client import report

    sess = session.Session(auth=token_endpoint.Token(url, 'admin'))
    # raise_exc=False as the SDK adapter Nova builds in production: the
    # report client reads error statuses itself (a 409 becomes
    # ResourceProviderUpdateConflict and a retry).
    return report.SchedulerReportClient(adapter=adapter.Adapter(
        sess, service_type='placement', default_microversion='1.39',
        raise_exc=False))


def update_to_placement(client, ctx, node: str, driver_update,
                        attempts: int = 4) -> int:
    """The resource tracker's ``_update_to_placement`` for one node.

    ``driver_update(tree, node)`` plays the virt driver's
    ``update_provider_tree``. Retried on a generation conflict, up to 4
    attempts, as Nova's decorator does. Returns the conflicts seen.
    """
    from nova import exception

    conflicts = 0
    for _ in range(attempts):
        try:
            tree = client.get_provider_subtree_and_ensure_root(
                ctx, root_uuid(node), name=node)
            client.get_allocations_for_provider_tree(ctx, node)
            tree.update_inventory(node, ROOT_INVENTORY)
            driver_update(tree, node)
            tree.update_traits(node, ROOT_TRAITS)
            client.update_from_provider_tree(ctx, tree)
            return conflicts
        except exception.ResourceProviderUpdateConflict:
            conflicts += 1
    raise RuntimeError('%s: %d generation conflicts in a row'
                       % (node, attempts))


def register_worker(args) -> int:
    """Client process: register hosts through the HTTP API."""
    import logging

    from nova import context

    logging.disable(logging.WARNING)
    spec = json.load(open(args.spec))
    hosts = [int(h) for h in args.hosts.split(',')]
    ctx = context.get_admin_context()
    local = threading.local()
    lock = threading.Lock()

    def one(i):
        if not hasattr(local, 'updater'):
            local.updater = make_updater(
                spec['sysfs_root'], spec['nics'],
                os.path.join(args.state_dir, 'state-%d-%d.sqlite'
                             % (os.getpid(), threading.get_ident())))
        node = nodename(i)
        start = time.perf_counter()
        error = None
        try:
            client = report_client(args.placement)
            update_to_placement(client, ctx, node, local.updater.update)
        except Exception as exc:  # noqa: BLE001 - reported, not hidden
            error = '%s: %s' % (type(exc).__name__, exc)
        with lock:
            # One line a host as it finishes: the parent counts them to
            # mark milestones (the first 100 hosts of a 1,000-host run).
            print(json.dumps({'host': i, 'seconds':
                              time.perf_counter() - start, 'error': error}),
                  flush=True)

    with concurrent.futures.ThreadPoolExecutor(args.threads) as pool:
        list(pool.map(one, hosts))
    return 0


def register(server: Placement, spec_path: str, hosts: int, clients: int,
             threads: int, workdir: str,
             milestones: tuple = ()) -> list[dict]:
    """Register hosts 0..hosts-1 from ``clients`` processes; measured.

    Returns one result for ``hosts`` and one for each milestone: the
    moment that many hosts had finished, with the requests the server had
    logged by then (the hosts still in flight at that moment have part of
    theirs counted: at most ``clients * threads`` hosts' worth).
    """
    state_dir = os.path.join(workdir, 'state-%d' % time.time_ns())
    os.makedirs(state_dir)
    mark = server.mark()
    cpu0 = server.cpu_seconds()
    start = time.perf_counter()
    procs = []
    for c in range(clients):
        mine = [str(i) for i in range(c, hosts, clients)]
        procs.append(subprocess.Popen(
            [sys.executable, __file__, '_register', '--placement',
             server.url, '--spec', spec_path, '--hosts', ','.join(mine),
             '--threads', str(threads), '--state-dir', state_dir],
            stdout=subprocess.PIPE, cwd=REPO_ROOT, text=True))
    results = []
    marks = {}
    lock = threading.Lock()

    def read(proc):
        for line in proc.stdout:
            if not line.startswith('{'):
                continue
            with lock:
                results.append(json.loads(line))
                if len(results) in milestones:
                    marks[len(results)] = (time.perf_counter() - start,
                                           server.mark(),
                                           server.cpu_seconds() - cpu0,
                                           list(results))

    readers = [threading.Thread(target=read, args=(p,)) for p in procs]
    for t in readers:
        t.start()
    for p, t in zip(procs, readers):
        t.join()
        if p.wait():
            raise RuntimeError('registration client failed')
    wall = time.perf_counter() - start
    cpu = server.cpu_seconds() - cpu0
    time.sleep(0.2)  # the last lines of the access log
    end = server.mark()
    shutil.rmtree(state_dir, ignore_errors=True)
    out = [_registration(hosts, wall, server.requests_between(mark, end),
                         cpu, results)]
    for n, (t, m, c, done) in sorted(marks.items()):
        r = _registration(n, t, server.requests_between(mark, m), c, done)
        r['milestone_of'] = hosts
        out.append(r)
    return out


def _registration(hosts, wall, served, cpu, results) -> dict:
    per_host = sorted(r['seconds'] for r in results)
    errors = [r['error'] for r in results if r['error']]
    kinds = collections.Counter(request_kind(m, p) for m, p, _, _ in served)
    return {
        'hosts': hosts, 'wall_s': wall, 'requests': len(served),
        'requests_per_host': len(served) / float(hosts),
        'writes': sum(1 for m, _, _, _ in served if m != 'GET'),
        'req_per_s': len(served) / wall,
        'hosts_per_s': hosts / wall,
        'status': dict(collections.Counter(str(s) for _, _, s, _ in served)),
        'host_median_s': statistics.median(per_host),
        'host_p95_s': percentile(per_host, 95),
        'server_median_ms': 1000 * statistics.median(
            t for _, _, _, t in served) if served else 0,
        'server_cpu_s': cpu,
        'failed_hosts': len(errors), 'first_error': errors[0] if errors
        else None, 'kinds': dict(kinds),
    }


_UUID_RE = re.compile(r'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-'
                      r'[0-9a-f]{12}')


def request_kind(method: str, path: str) -> str:
    path = _UUID_RE.sub('{uuid}', path.partition('?')[0])
    path = re.sub(r'/(traits|resource_classes)/[A-Z0-9_]+$', r'/\1/{name}',
                  path)
    path = re.sub(r'/inventories/[A-Z0-9_]+$', '/inventories/{rc}', path)
    return '%s %s' % (method, path)


def percentile(values: list, pct: float) -> float:
    values = sorted(values)
    if not values:
        return float('nan')
    k = (len(values) - 1) * pct / 100.0
    lo = int(k)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


# -- allocation candidates ---------------------------------------------------

def flavor_queries() -> dict:
    """Flavor -> query string, as Nova 34's scheduler builds it."""
    from urllib import parse

    from nova import objects
    from nova.scheduler import utils

    objects.register_all()
    out = collections.OrderedDict()
    for name, extra in FLAVORS.items():
        flavor = objects.Flavor(vcpus=2, memory_mb=4096, root_gb=20,
                                ephemeral_gb=0, swap=0, extra_specs=extra)
        spec = objects.RequestSpec(
            flavor=flavor, is_bfv=False,
            image=objects.ImageMeta(properties=objects.ImageMetaProps()))
        rr = utils.ResourceRequest.from_request_spec(spec)
        rr._limit = 1000  # [scheduler] max_placement_results
        # The compute_status_filter prefilter (on by default).
        rr._root_forbidden.add('COMPUTE_STATUS_DISABLED')
        out[name] = parse.urlencode(
            sorted(parse.parse_qsl(rr.to_querystring())), safe=':,!')
    return out


def verify_tree(url_a: str, url_b: str, node: str) -> bool:
    """The same tree (names, uuids, parents, inventories, traits)?"""
    def read(url):
        _, body, _ = http(url + '/resource_providers?in_tree=%s'
                          % root_uuid(node))
        tree = []
        for rp in body['resource_providers']:
            _, inv, _ = http(url + '/resource_providers/%s/inventories'
                             % rp['uuid'])
            _, traits, _ = http(url + '/resource_providers/%s/traits'
                                % rp['uuid'])
            tree.append((rp['uuid'], rp['name'], rp['parent_provider_uuid'],
                         json.dumps(inv['inventories'], sort_keys=True),
                         tuple(sorted(traits['traits']))))
        return sorted(tree)
    a, b = read(url_a), read(url_b)
    return bool(a) and a == b


def measure_candidates(servers: dict, queries: dict, samples: int,
                       budget_s: float, timeout: float,
                       skip: dict, min_samples: int = 3) -> dict:
    """{shape: {flavor: {...}}}: interleaved across shapes per flavor.

    One warm-up request per cell, then ``samples`` timed ones, fewer once
    a cell has spent ``budget_s`` (at least ``min_samples``). A cell whose
    warm-up took over 10 s counts it as a sample (its cache effects are
    noise at that size). A request that times out ends its cell (its
    latency is then a lower bound: the timeout). ``skip``:
    (shape, flavor) -> why not run.
    """
    out = {shape: {} for shape in servers}
    for flavor, query in queries.items():
        cells = {}
        for shape in servers:
            if (shape, flavor) in skip:
                out[shape][flavor] = {'skipped': skip[shape, flavor]}
            else:
                cells[shape] = {'times': [], 'candidates': None,
                                'status': None}
        spent = collections.Counter()
        for n in range(samples + 1):
            for shape, cell in cells.items():
                if cell.get('timed_out') or (
                        len(cell['times']) >= min_samples
                        and spent[shape] > budget_s):
                    continue
                try:
                    status, body, took = http(
                        servers[shape].url + '/allocation_candidates?'
                        + query, version='1.36', timeout=timeout)
                except (socket.timeout, TimeoutError, urllib.error.URLError):
                    cell['timed_out'] = True
                    continue
                spent[shape] += took
                cell['status'] = status
                if status == 200:
                    cell['candidates'] = len(body['allocation_requests'])
                    cell['summaries'] = len(body['provider_summaries'])
                if n or took > 10.0:
                    cell['times'].append(took * 1000.0)
        for shape, cell in cells.items():
            times = cell.pop('times')
            cell.update(n=len(times))
            if times:
                cell.update(median_ms=statistics.median(times),
                            p95_ms=percentile(times, 95),
                            max_ms=max(times))
            out[shape][flavor] = cell
    return out


# -- the run -----------------------------------------------------------------

def machine() -> dict:
    placement, gunicorn, sqlalchemy = placement_version()
    return {'cores': os.cpu_count(), 'python': platform.python_version(),
            'placement': placement, 'gunicorn': gunicorn,
            'sqlalchemy': sqlalchemy,
            'memory_gib': round(os.sysconf('SC_PAGE_SIZE')
                                * os.sysconf('SC_PHYS_PAGES') / 2 ** 30)}


def run(args) -> dict:
    workdir = tempfile.mkdtemp(prefix='cyborg-nova-scale-')
    os.chmod(workdir, 0o755)
    result = {'machine': machine(), 'args': vars(args).copy(),
              'registration': [], 'candidates': {}, 'fill': []}
    pg = None
    servers = []
    try:
        log('host spec')
        spec = host_spec(workdir)
        spec_path = os.path.join(workdir, 'spec.json')
        with open(spec_path, 'w') as f:
            json.dump(spec, f)
        result['spec'] = {
            'children': {s: len(shape_children(spec, s)) for s in SHAPES},
            'units': sum(next(iter(c['inventory'].values()))['total']
                         for c in spec['children']),
            'classes': collections.Counter(
                next(iter(c['inventory'])) for c in spec['children'])}
        backends = args.backends.split(',')
        if 'postgresql' in backends or args.candidate_hosts:
            if not Postgres.available():
                raise SystemExit('PostgreSQL 15 not installed (or not '
                                 'root): run tools/setup-bench-venvs.sh')
            pg = Postgres(workdir)
            pg.start()
            result['machine']['postgresql'] = pg.version()
        reference = None
        sizes = sorted(int(h) for h in args.register_hosts.split(',') if h)
        # One run a backend at the largest size; the smaller sizes are
        # milestones of it (the moment that many hosts had finished).
        plan = [(backend, sizes[-1], tuple(sizes[:-1]), False)
                for backend in backends] if sizes else []
        if args.durable_check:
            plan += [(backend, args.durable_check, (), True)
                     for backend in backends]
        for backend, hosts, milestones, durable in plan:
            name = 'reg_%s_%d%s' % (backend, hosts,
                                    '_durable' if durable else '')
            if backend == 'sqlite':
                url = 'sqlite:///%s' % os.path.join(workdir,
                                                    name + '.sqlite')
                workers = 1
            else:
                url = pg.create_db(name, durable)
                workers = args.pg_workers
            server = Placement(workdir, name, url, workers,
                               durable=durable)
            servers.append(server)
            server.sync()
            server.start()
            log('registration: %d hosts, %s, %d worker(s)%s'
                % (hosts, backend, workers,
                   ', durable' if durable else ''))
            for r in sorted(register(server, spec_path, hosts, args.clients,
                                     args.threads, workdir, milestones),
                            key=lambda r: r['hosts']):
                r.update(backend=backend, workers=workers, durable=durable)
                log('  %d hosts: %.1f s, %d requests, %d failed hosts'
                    % (r['hosts'], r['wall_s'], r['requests'],
                       r['failed_hosts']))
                result['registration'].append(r)
            if backend == 'postgresql' and reference is None:
                reference = server  # kept running for the check
            else:
                server.stop()
        if args.candidate_hosts:
            result['candidates'] = candidates(args, pg, spec, spec_path,
                                              workdir, reference, result)
        if reference is not None:
            reference.stop()
    finally:
        for server in servers:
            server.stop()
        if pg is not None:
            pg.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return result


def candidates(args, pg, spec, spec_path, workdir, reference,
               result) -> dict:
    queries = flavor_queries()
    result['queries'] = queries
    out = {}
    servers = {}
    dbs = {}
    for shape in SHAPES:
        name = 'ac_%s' % shape.replace('-', '').lower()
        dbs[shape] = pg.create_db(name)
        servers[shape] = Placement(workdir, name, dbs[shape],
                                   args.ac_workers, timeout=int(
                                       args.timeout) + 5)
        servers[shape].sync()
        servers[shape].start()
        servers[shape].ensure_custom(spec)
        servers[shape].stop()
    filled = 0
    skip = {}
    for hosts in [int(h) for h in args.candidate_hosts.split(',')]:
        for shape in SHAPES:
            log('bulk fill %s: hosts %d..%d' % (shape, filled, hosts))
            counts = run_bulk_fill(dbs[shape], spec_path, shape, filled,
                                   hosts)
            counts.update(shape=shape, first=filled, last=hosts)
            result['fill'].append(counts)
        filled = hosts
        for setting in (WIDE_OFF, WIDE_ON):
            for shape in SHAPES:
                servers[shape].start(WIDE_SETTINGS[setting])
            if reference is not None and 'bulk_check' not in result:
                result['bulk_check'] = verify_tree(
                    reference.url, servers[PER_PF].url, nodename(0))
                log('bulk fill matches HTTP registration: %s'
                    % result['bulk_check'])
            log('candidates: %d hosts, wide-tree setting %s'
                % (hosts, setting))
            cell = measure_candidates(servers, queries, args.samples,
                                      args.budget, args.timeout,
                                      skip.get(setting, {}),
                                      args.min_samples)
            for shape in SHAPES:
                servers[shape].stop()
            out.setdefault(str(hosts), {})[setting] = cell
            for shape, flavors in cell.items():
                for flavor, c in flavors.items():
                    log('  %s %s: %s' % (shape, flavor, {
                        k: (round(v, 1) if isinstance(v, float) else v)
                        for k, v in c.items()}))
                    # A cell that timed out with no sample would only time
                    # out again at a larger size: not run there, its
                    # latency reported as more than the timeout.
                    if c.get('timed_out') and not c.get('n'):
                        skip.setdefault(setting, {})[shape, flavor] = (
                            'timed out (> %.0f s) at {:,} hosts already'
                            .format(hosts) % args.timeout)
                    elif c.get('skipped'):
                        skip.setdefault(setting, {})[shape, flavor] = \
                            c['skipped']
    return out


# -- report ------------------------------------------------------------------

def machine_line(m: dict) -> str:
    return ('%d cores, %d GiB, Python %s, openstack-placement %s (gunicorn '
            '%s, SQLAlchemy %s), PostgreSQL %s, SQLite %s' % (
                m['cores'], m['memory_gib'], m['python'], m['placement'],
                m['gunicorn'], m['sqlalchemy'], m.get('postgresql', 'n/a'),
                __import__('sqlite3').sqlite_version))


def report(result: dict, seconds: float) -> str:
    args = result['args']
    spec = result['spec']
    lines = [
        '# Placement at scale: registration and allocation candidates',
        '',
        'Generated by `benchmarks/scale.py` in %.0f s. Machine: %s. '
        'Everything (Placement, its database, the clients) shares these '
        'cores, over loopback.' % (seconds, machine_line(result['machine'])),
        '',
    ]
    if result.get('note'):
        lines += [result['note'], '']
    lines += [
        'Each simulated compute has 10 accelerators (2 QAT 4xxx x 16 VFs, '
        '2 E810 x 16 VFs, 2 A100 x 16 VFs, 2 T4, 2 PAC: %d assignable '
        'units): %d child providers in this project\'s shape (per-PF), %d '
        'in the per-VF shape upstream Cyborg\'s NIC and QAT drivers '
        'produce. (cyborg-nova holds the A100s\' VGPU inventory fully '
        'reserved until a vGPU type is set up, so it is never a '
        'candidate here.)' % (spec['units'], spec['children'][PER_PF],
                              spec['children'][PER_VF]),
        '',
        '## Registration through the HTTP API',
        '',
        'Each host runs nova-compute\'s `_update_to_placement` (Nova 34\'s '
        '`SchedulerReportClient` and `ProviderTree`, cyborg-nova\'s '
        '`ProviderTreeUpdater` over a fake sysfs tree), from %d client '
        'processes x %d threads (%d hosts in flight). Requests counted at '
        'the server. Unless marked durable, commits are not flushed to disk '
        '(SQLite `sqlite_synchronous = False`, PostgreSQL '
        '`synchronous_commit = off`), so that the runs compare the engines '
        'and their workers rather than this machine\'s disk (about 3 ms a '
        'flush); the durable runs use the databases\' defaults.'
        % (args['clients'], args['threads'],
           args['clients'] * args['threads']),
        '',
        'The smaller sizes are milestones of the largest run on the same '
        'server: the moment that many hosts had finished, with the '
        'requests logged by then (hosts still in flight then have part of '
        'theirs counted).',
        '',
        '| database | gunicorn workers | hosts | total s | requests | '
        'requests/host | requests/s | hosts/s | host median s | host p95 s '
        '| Placement CPU s | errors (4xx/5xx) | failed hosts |',
        '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ]
    for r in result['registration']:
        errors = sum(n for s, n in r['status'].items() if int(s) >= 400)
        lines.append(
            '| %s | %d | {:,}%s | %.1f | {:,} | %.1f | %.0f | %.1f | %s | '
            '%s | %s | %d | %d |'.format(r['hosts'], r['requests'])
            % (r['backend'] + (' (durable)' if r.get('durable') else ''),
               r['workers'], ' (first of {:,})'.format(r['milestone_of'])
               if r.get('milestone_of') else '', r['wall_s'],
               r['requests_per_host'], r['req_per_s'], r['hosts_per_s'],
               _num(r.get('host_median_s'), '%.2f'),
               _num(r.get('host_p95_s'), '%.2f'),
               _num(r.get('server_cpu_s'), '%.0f'),
               errors, r['failed_hosts']))
    for r in result.get('registration_stopped') or []:
        lines += ['', '**Not finished:** the %s registration of {:,} hosts '
                  '(%d workers) was stopped after %.0f s, having served '
                  '{:,} requests (about %.0f hosts\' worth, %.1f requests/s, '
                  '%d errors).'.format(r['hosts_planned'], r['requests'])
                  % (r['backend'], r['workers'], r['stopped_after_s'],
                     r['hosts_worth'], r['req_per_s'], r['errors'])]
    first_errors = [r['first_error'] for r in result['registration']
                    if r['first_error']]
    if first_errors:
        lines += ['', 'First client error: `%s`' % first_errors[0][:300]]
    if result['registration']:
        r = result['registration'][0]
        lines += ['', 'Requests of one registration, by kind (all hosts of '
                  'the first run, per host):', '',
                  '| request | per host |', '|---|---:|']
        for kind, n in sorted(r['kinds'].items(), key=lambda kv: -kv[1]):
            lines.append('| `%s` | %.1f |' % (kind, n / float(r['hosts'])))
    if result.get('candidates'):
        lines += candidates_report(result)
    return '\n'.join(lines) + '\n'


def candidates_report(result: dict) -> list:
    args = result['args']
    fills = collections.defaultdict(dict)
    for f in result['fill']:
        fills[f['shape']][f['last']] = f
    lines = [
        '',
        '## Allocation candidates: one provider per PF against one per VF',
        '',
        'PostgreSQL %s, gunicorn %d workers per shape; the two shapes in two '
        'databases, served side by side and queried alternately, one '
        'request at a time; %d timed requests per cell after one warm-up '
        '(fewer where a cell used up its %.0f s budget; n says how many), '
        'client timeout %.0f s. Databases filled in bulk: rows written '
        'straight into Placement\'s tables with its own SQLAlchemy models '
        '(providers, inventories, traits; no allocations, all capacity '
        'free), the same trees the HTTP registration creates: %s.'
        % (result['machine'].get('postgresql'), args['ac_workers'],
           args['samples'], args['budget'], args['timeout'],
           {True: 'checked, host 0 read back through the API equals host 0 '
                  'registered through HTTP above',
            False: '**the check against the HTTP registration FAILED**',
            None: 'not checked in this run'}[result.get('bulk_check')]),
        '',
        'Wide-tree setting: `off` = Placement 16\'s defaults '
        '(`[placement] max_allocation_candidates = -1`, '
        '`allocation_candidates_generation_strategy = depth-first`); `on` '
        '= `max_allocation_candidates = 1000`, `breadth-first`. Queries '
        '(microversion 1.36, as Nova 34\'s scheduler sends them):',
        '',
    ]
    for flavor, query in result['queries'].items():
        lines.append('- %s: `%s`' % (flavor, query))
    lines += [
        '',
        '| hosts | wide-tree | flavor | per-PF median ms | p95 ms | '
        'candidates | per-VF median ms | p95 ms | candidates | per-VF / '
        'per-PF (median) |',
        '|---:|---|---|---:|---:|---:|---:|---:|---:|---:|',
    ]
    for hosts, settings in result['candidates'].items():
        for setting, shapes in settings.items():
            for flavor in result['queries']:
                pf = shapes[PER_PF][flavor]
                vf = shapes[PER_VF][flavor]
                lines.append('| {:,} | %s | %s | %s | %s | %s | %s | %s | %s '
                             '| %s |'.format(int(hosts)) % (
                                 setting, flavor, _ms(pf, 'median_ms'),
                                 _ms(pf, 'p95_ms'), _cands(pf),
                                 _ms(vf, 'median_ms'), _ms(vf, 'p95_ms'),
                                 _cands(vf),
                                 ratio(vf, pf, args['timeout'])))
    skipped = [
        '- {:,} hosts, setting %s, %s, %s: %s'.format(int(hosts))
        % (setting, shape, flavor, cell['skipped'])
        for hosts, settings in result['candidates'].items()
        for setting, shapes in settings.items()
        for shape, flavors in shapes.items()
        for flavor, cell in flavors.items() if cell.get('skipped')]
    lines += [
        '',
        '`candidates` = allocation requests returned (at most the `limit` '
        'of 1000 Nova asks for); `timeout` = no answer within the client '
        'timeout of %.0f s (the ratio is then a lower bound, `>`); `n/r` = '
        'not run, because it timed out at the smaller size already%s'
        % (args['timeout'], ':' if skipped else ' (none in this run).'),
        '',
    ] + skipped
    lines += [
        '',
        'Bulk fill (one process, straight into PostgreSQL):',
        '',
        '| shape | hosts | providers | inventory rows | trait rows | s |',
        '|---|---|---:|---:|---:|---:|',
    ]
    for f in result['fill']:
        lines.append('| %s | %d..%d | {:,} | {:,} | {:,} | %.1f |'.format(
            f['providers'], f['inventories'], f['traits'])
            % (f['shape'], f['first'], f['last'] - 1, f['seconds']))
    return lines


def _num(value, fmt: str) -> str:
    """A figure a run may not have recorded (``n/a``)."""
    return 'n/a' if value is None else fmt % value


def _ms(cell: dict, key: str) -> str:
    if cell.get('skipped'):
        return 'n/r'
    if cell.get('timed_out') and not cell.get('n'):
        return 'timeout'
    if key not in cell:
        return 'n/a'
    text = '{:,.0f}'.format(cell[key]) if cell[key] >= 100 else \
        '%.1f' % cell[key]
    if key == 'median_ms':
        text += ' (n=%d%s)' % (cell['n'], ', then timeout'
                               if cell.get('timed_out') else '')
    return text


def _cands(cell: dict) -> str:
    if cell.get('skipped') or cell.get('candidates') is None:
        return '' if cell.get('skipped') else str(cell.get('status') or '')
    return '%d' % cell['candidates']


def ratio(vf: dict, pf: dict, timeout: float = None) -> str:
    if 'median_ms' not in pf:
        return 'n/a'
    if 'median_ms' not in vf:
        if timeout and (vf.get('timed_out') or vf.get('skipped')):
            # Timed out: at least the timeout.
            return '> %.0fx' % (1000.0 * timeout / pf['median_ms'])
        return 'n/a'
    return '%.1fx' % (vf['median_ms'] / pf['median_ms'])


def main(argv=None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == '_fill':
        p = argparse.ArgumentParser()
        for opt in ('--db', '--spec', '--shape'):
            p.add_argument(opt, required=True)
        p.add_argument('--first', type=int, required=True)
        p.add_argument('--last', type=int, required=True)
        a = p.parse_args(argv[1:])
        with open(a.spec) as f:
            spec = json.load(f)
        print(json.dumps(bulk_fill(a.db, spec, a.shape, a.first, a.last)))
        return 0
    if argv and argv[0] == '_register':
        sys.path.insert(0, REPO_ROOT)
        p = argparse.ArgumentParser()
        for opt in ('--placement', '--spec', '--hosts', '--state-dir'):
            p.add_argument(opt, required=True)
        p.add_argument('--threads', type=int, default=4)
        return register_worker(p.parse_args(argv[1:]))

    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--quick', action='store_true',
                        help='small sizes: register 20,100 hosts; '
                             'candidates at 100,500 hosts; 3 samples')
    parser.add_argument('--register-hosts', default=None,
                        help='hosts per registration run (default '
                             '100,1000)')
    parser.add_argument('--backends', default='sqlite,postgresql')
    parser.add_argument('--durable-check', type=int, default=None,
                        help='also register this many hosts on each '
                             'backend with commits flushed to disk (the '
                             'databases\' defaults; default 100, quick '
                             '20; 0: skip). The other runs do not wait '
                             'for the disk on commit')
    parser.add_argument('--pg-workers', type=int, default=4,
                        help='gunicorn workers on PostgreSQL (default 4)')
    parser.add_argument('--clients', type=int, default=3,
                        help='client processes (default 3)')
    parser.add_argument('--threads', type=int, default=4,
                        help='hosts in flight per client (default 4)')
    parser.add_argument('--candidate-hosts', default=None,
                        help='database sizes for allocation candidates '
                             '(default 1000,5000; "" to skip)')
    parser.add_argument('--ac-workers', type=int, default=2)
    parser.add_argument('--samples', type=int, default=None,
                        help='timed requests per cell (default 8)')
    parser.add_argument('--budget', type=float, default=30.0,
                        help='seconds per cell before sampling stops '
                             '(at least --min-samples; default 30)')
    parser.add_argument('--min-samples', type=int, default=3,
                        help='timed requests per cell however slow '
                             '(default 3)')
    parser.add_argument('--timeout', type=float, default=120.0,
                        help='client timeout of one candidates request')
    parser.add_argument('--keep', action='store_true',
                        help='keep the work directory')
    parser.add_argument('--output', default=os.path.join(
        HERE, 'results', 'scale.md'))
    args = parser.parse_args(argv)
    if args.register_hosts is None:
        args.register_hosts = '20,100' if args.quick else '100,1000'
    if args.candidate_hosts is None:
        args.candidate_hosts = '100,500' if args.quick else '1000,5000'
    if args.samples is None:
        args.samples = 3 if args.quick else 8
    if args.durable_check is None:
        args.durable_check = 20 if args.quick else 50
    if not Placement.available():
        raise SystemExit('no %s: run tools/setup-bench-venvs.sh'
                         % PLACEMENT_VENV)
    sys.path.insert(0, REPO_ROOT)
    return run_and_write(run, report, args)


def run_and_write(run_fn, report_fn, args) -> int:
    """Run, then write ``args.output`` (Markdown) and its ``.json``."""
    start = time.perf_counter()
    result = run_fn(args)
    seconds = time.perf_counter() - start
    result['seconds'] = seconds
    # The JSON is committed with the results: no path of this machine.
    if 'output' in result.get('args', {}):
        result['args']['output'] = os.path.relpath(args.output, REPO_ROOT)
    text = report_fn(result, seconds)
    print(text)
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, 'w') as f:
        f.write(text)
    with open(os.path.splitext(args.output)[0] + '.json', 'w') as f:
        json.dump(result, f, indent=1, default=str)
    return 0


if __name__ == '__main__':
    sys.exit(main())
