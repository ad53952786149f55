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

"""Random sequences of Nova operations never break the unit invariants.

Three computes from ``crypto-nic-host``, the libvirt driver on Nova's
fakelibvirt, real Placement. A seeded generator drives
``CYBORG_NOVA_LIFECYCLE_OPS`` operations (default 200): boot, delete,
resize and cold migrate with confirm or revert, evacuate, shelve and
unshelve, hard reboot, stop/start, a compute going down and coming
back, and update cycles. After every step
:meth:`~tests.functional.nova.moves.MovesTestCase.check` must hold: no
unit serves two consumers, every running guest's XML has exactly its
allocated units, and on every compute that is up each provider's units
per consumer equal Placement's allocations (so free units equal free
inventory).

A failure names its seed; ``CYBORG_NOVA_LIFECYCLE_SEED=<seed>`` replays
that exact run.
"""

import collections
import os
import random
import time

from nova import context as nova_context
from nova.tests.functional.api import client

from cyborg_drivers.nvidia import vgpu
from tests.counts import record
from tests.functional.nova import moves
from tests.functional.nova import test_programming_moves
from tests.functional.nova import test_vgpu_moves
from tests.unit.programming import fakes


class TestRandomLifecycle(moves.MovesTestCase):

    hosts = ('host1', 'host2', 'host3')
    DEFAULT_OPS = 200

    def setUp(self):
        super().setUp()
        self.down = set()
        self.flavors = [
            self.qat_flavor(1),
            self.qat_flavor(2),
            self.qat_flavor(4),
            self.flavor({'resources:CUSTOM_QAT': '3'}, name='qat3-any'),
            self.flavor({}, name='plain'),
        ]

    # -- what the API shows --------------------------------------------------

    def servers(self):
        return self.admin_api.get_servers(
            detail=True, search_opts={'all_tenants': 1})

    def settle(self, server):
        """``server`` once its task is done and it is not building."""
        for _ in range(500):
            server = self.admin_api.get_server(server['id'])
            if (server['OS-EXT-STS:task_state'] is None
                    and server['status'] != 'BUILD'):
                return server
            time.sleep(0.02)
        self.fail('server %s never settled: %s / %s' % (
            server['id'], server['status'],
            server['OS-EXT-STS:task_state']))

    def on_up_host(self, server):
        return server['OS-EXT-SRV-ATTR:host'] not in self.down

    def pick(self, rng, status, up=True):
        found = [s for s in self.servers() if s['status'] == status and (
            self.on_up_host(s) == up)]
        return rng.choice(found) if found else None

    # -- the operations; each returns what it did, or None if it could not
    #    apply now ----------------------------------------------------------

    def op_boot(self, rng):
        if len(self.servers()) >= 10:
            return None
        flavor = rng.choice(self.flavors)
        server = self.api.post_server({'server': self._build_server(
            flavor_id=flavor, networks='none')})
        server = self.settle(server)
        if server['status'] == 'ERROR':
            # No host with room: Nova's scheduler said so, nothing holds
            # anything; the server is cleaned up.
            self.delete(server)
            return 'boot refused (no room)'
        return 'boot %s on %s' % (server['id'][:8],
                                  server['OS-EXT-SRV-ATTR:host'])

    def op_delete(self, rng):
        candidates = [s for s in self.servers()
                      if s['status'] != 'VERIFY_RESIZE' or
                      not self.down]
        if not candidates:
            return None
        server = rng.choice(candidates)
        # The API deletes the server itself, telling no compute, when it
        # sees the server's compute down: stopped here, or a running one
        # whose state reports this harness starved for over
        # service_down_time on a loaded host.
        host = server['OS-EXT-SRV-ATTR:host']
        by_api = not self.on_up_host(server) or (
            host is not None and self.api_sees_down(host))
        self.delete(server)
        if by_api:
            # A compute that still has the server's units (the server's
            # own one, or one where its evacuation failed) keeps them
            # until its next update cycle reconciles them with Placement,
            # which the next check then proves. Only those rows may
            # outlive the delete.
            self.check(skip_hosts=self.down, stale={server['id']})
            self.cycle_up_hosts()
            return 'delete %s (%s, by the API; up hosts reconciled)' % (
                server['id'][:8], server['status'])
        return 'delete %s (%s)' % (server['id'][:8], server['status'])

    def _move(self, rng, action):
        server = self.pick(rng, 'ACTIVE')
        if server is None or self.down:
            return None
        if action == 'resize':
            current = server['flavor']['original_name']
            flavor = rng.choice([f for f in self.flavors
                                 if self.flavor_name(f) != current])
            body = {'resize': {'flavorRef': flavor}}
        else:
            body = {'migrate': None}
        try:
            self.api.post_server_action(server['id'], body)
        except client.OpenStackApiException:
            # The harness turns casts into calls: a scheduling failure
            # reaches the API. The server stays as it was.
            pass
        server = self.settle(server)
        return '%s %s -> %s' % (action, server['id'][:8], server['status'])

    def flavor_name(self, flavor_id):
        return self.api.get_flavor(flavor_id)['name']

    def op_resize(self, rng):
        return self._move(rng, 'resize')

    def op_migrate(self, rng):
        return self._move(rng, 'migrate')

    def op_confirm_or_revert(self, rng):
        server = self.pick(rng, 'VERIFY_RESIZE')
        if server is None or self.down:
            return None
        if rng.random() < 0.5:
            self._confirm_resize(server)
            return 'confirm %s' % server['id'][:8]
        self._revert_resize(server)
        return 'revert %s' % server['id'][:8]

    def op_evacuate(self, rng):
        server = (self.pick(rng, 'ACTIVE', up=False) or
                  self.pick(rng, 'SHUTOFF', up=False))
        if server is None:
            return None
        # Nova refuses to evacuate onto a hypervisor that still has the
        # instance's domain. Here one can: the libvirt driver undefines a
        # confirmed migration's source domain only when the global
        # CONF.host (the last compute started in this process) is not
        # the instance's host. Such a host is not chosen.
        targets = [h for h in self.hosts if h not in self.down
                   and not self.has_domain(server, h)]
        if not targets:
            return None
        try:
            self.api.post_server_action(server['id'], {'evacuate': {
                'host': rng.choice(targets)}})
        except client.OpenStackApiException:
            # No room there: as for a move, the harness's casts-as-calls
            # bring the scheduler's answer to the API; nothing moved.
            pass
        server = self.settle(server)
        if server['status'] == 'SHUTOFF' and self.on_up_host(server):
            self._start_server(server)
            server = self._wait_for_state_change(server, 'ACTIVE')
        return 'evacuate %s -> %s on %s' % (
            server['id'][:8], server['status'],
            server['OS-EXT-SRV-ATTR:host'])

    def api_sees_down(self, host):
        """Whether Nova's API takes ``host``'s compute for down."""
        return any(s['state'] == 'down' for s in self.admin_api.get_services(
            binary='nova-compute', host=host))

    def has_domain(self, server, host=None):
        """Whether ``host``'s fakelibvirt has a domain for ``server``."""
        conn = self.computes[host or server['OS-EXT-SRV-ATTR:host']]
        try:
            conn.driver._host.get_connection().lookupByUUIDString(
                server['id'])
        except Exception:
            return False
        return True

    def op_shelve(self, rng):
        # Shelving snapshots the running domain. In this one-process
        # harness Nova's libvirt driver undefines a same-host resize's
        # domain on confirm when CONF.host (global here, the last compute
        # started) is another compute's name, so such a server has no
        # domain until its next hard reboot; it is not picked.
        found = [s for s in self.servers() if s['status'] == 'ACTIVE'
                 and self.on_up_host(s) and self.has_domain(s)]
        if not found:
            return None
        server = rng.choice(found)
        self._shelve_server(server)
        return 'shelve %s' % server['id'][:8]

    def op_unshelve(self, rng):
        server = self.pick(rng, 'SHELVED_OFFLOADED', up=True)
        if server is None:
            return None
        self.api.post_server_action(server['id'], {'unshelve': None})
        server = self.settle(server)
        return 'unshelve %s -> %s' % (server['id'][:8], server['status'])

    def op_reboot(self, rng):
        server = self.pick(rng, 'ACTIVE')
        if server is None:
            return None
        self._reboot_server(server, hard=True)
        return 'hard reboot %s' % server['id'][:8]

    def op_stop_start(self, rng):
        server = self.pick(rng, 'ACTIVE')
        if server is None:
            return None
        self._stop_server(server)
        self._start_server(server)
        self._wait_for_state_change(server, 'ACTIVE')
        return 'stop/start %s' % server['id'][:8]

    def op_host_down(self, rng):
        up = [h for h in self.hosts if h not in self.down]
        if len(up) < 2:
            return None
        # Resizes waiting for confirmation are settled first: Nova
        # cannot confirm or revert with a compute down.
        for server in self.servers():
            if server['status'] == 'VERIFY_RESIZE':
                if rng.random() < 0.5:
                    self._confirm_resize(server)
                else:
                    self._revert_resize(server)
        host = rng.choice(up)
        self.stop_host(host)
        self.down.add(host)
        return 'compute %s down' % host

    def op_host_up(self, rng):
        if not self.down:
            return None
        host = rng.choice(sorted(self.down))
        self.restart_host(host)
        self.down.discard(host)
        return 'compute %s up' % host

    def op_cycle(self, rng):
        self.cycle_up_hosts()
        return 'update cycle'

    def op_reap(self, rng):
        """Nova's periodic reaping of deleted instances' domains.

        A server the API deleted without its compute keeps its units,
        kept for its domain and reserved, until this; its compute frees
        them as it destroys the domain.
        """
        kept = {h: self.kept(h) for h in self.hosts if h not in self.down}
        if not any(kept.values()):
            return None
        for host in kept:
            self.reap(host)
        return 'reap %d kept unit(s)' % sum(map(len, kept.values()))

    def cycle_up_hosts(self):
        ctxt = nova_context.get_admin_context()
        for host in self.hosts:
            if host not in self.down:
                self.computes[host].manager.update_available_resource(ctxt)

    OPERATIONS = (
        (op_boot, 6), (op_delete, 2), (op_resize, 3), (op_migrate, 2),
        (op_confirm_or_revert, 4), (op_evacuate, 2), (op_shelve, 1),
        (op_unshelve, 1), (op_reboot, 1), (op_stop_start, 1),
        (op_host_down, 1), (op_host_up, 1), (op_cycle, 1), (op_reap, 1),
    )

    def test_random_operations(self):
        seed = int(os.environ.get('CYBORG_NOVA_LIFECYCLE_SEED') or
                   random.SystemRandom().randrange(2 ** 32))
        count = int(os.environ.get('CYBORG_NOVA_LIFECYCLE_OPS',
                                   self.DEFAULT_OPS))
        rng = random.Random(seed)
        ops = [op for op, _ in self.OPERATIONS]
        done = []
        try:
            # A short run (the older Novas do 40) may not have drawn
            # every kind of move by ``count``: it goes on until it has,
            # up to three times as long.
            while len(done) < count or (
                    self.missing(done) and len(done) < 3 * count):
                op = rng.choices(ops, self.weights(done, count))[0]
                what = op(self, rng)
                if what is None:
                    continue
                done.append(what)
                self.check_up_hosts()
        except Exception as exc:
            # What failed comes before the operations, which can be
            # long: the test command's summary keeps a message's start.
            raise AssertionError(
                'seed %d failed after %d operations (replay with '
                'CYBORG_NOVA_LIFECYCLE_SEED=%d) in %s: %s\nthe '
                'operations: %s' % (seed, len(done), seed, op.__name__,
                                    exc, '; '.join(done))) from exc
        kinds = self.kinds(done)
        record('random lifecycle, seed %d: %d operations (%s), '
               'invariants checked after each' % (seed, len(done), ', '.join(
                   '%s %d' % kv for kv in sorted(kinds.items()))))
        # The run must have exercised the moves, not only boots.
        self.assertEqual([], self.missing(done),
                         'seed %d never did these' % seed)

    # What a run must have done, by the first word of what each step did.
    REQUIRED = ('boot', 'resize', 'migrate', 'evacuate', 'compute')
    # The kind each operation's step counts as, where it is required.
    KINDS = {'op_boot': 'boot', 'op_resize': 'resize',
             'op_migrate': 'migrate', 'op_evacuate': 'evacuate',
             'op_host_down': 'compute', 'op_host_up': 'compute'}

    def weights(self, done, count):
        """Each operation's weight for the next draw.

        While a compute is down its servers are evacuated more often.
        Past ``count`` steps, a run that has not yet done a required kind
        draws it ten times as often, and what it waits on too: a cold
        move needs every compute up, an evacuation one down. Without
        that, a run whose computes were down for long stretches could
        reach three times ``count`` without a resize.
        """
        missing = set(self.missing(done)) if len(done) >= count else set()
        weights = []
        for op, weight in self.OPERATIONS:
            name = op.__name__
            if self.down and name == 'op_evacuate':
                weight *= 3
            if self.KINDS.get(name) in missing:
                weight *= 10
            if ((name == 'op_host_up' and self.down
                 and missing & {'resize', 'migrate'})
                    or (name == 'op_host_down' and not self.down
                        and 'evacuate' in missing)):
                weight *= 10
            weights.append(weight)
        return weights

    @staticmethod
    def kinds(done):
        return collections.Counter(what.split(' ')[0] for what in done)

    def missing(self, done):
        kinds = self.kinds(done)
        return [kind for kind in self.REQUIRED if kind not in kinds]

    def check_up_hosts(self):
        """:meth:`check`, leaving the computes that are down out.

        A compute that is down cannot know what the API deleted
        meanwhile; it reconciles when it is back.
        """
        self.check(skip_hosts=self.down)


class TestRandomAcceleratorLifecycle(TestRandomLifecycle,
                                     test_vgpu_moves.VgpuMovesTestCase,
                                     test_programming_moves.
                                     ProgrammingMovesTestCase):
    """The same random operations on vGPU and bitstream servers.

    Three computes, each with an H200 whose vGPUs are vendor-VFIO VFs
    (``vgpu-vfio-host``, type 1414) and, through the ``fake`` driver, the
    PACs and the Alveo of ``fpga-host``. Flavors ask for a vGPU, for a PAC
    programmed with ``dma`` or with ``nlb3``, or for nothing. After every
    step, besides the invariants above: every unit a guest holds is made
    (its VF holds the type), and every PAC a running bitstream server
    holds shows that server's function, so no move ever programmed a
    card another server holds.
    """

    DEFAULT_OPS = 100
    enabled_drivers = ['nvidia_gpu', 'fake']
    profile = 'vgpu-vfio-host'
    gpu_options = {'vfio_vgpu_types': ['%s=1414' % test_vgpu_moves.H200]}
    gpu = test_vgpu_moves.H200
    trait = test_vgpu_moves.H200_1414
    framework = vgpu.VFIO

    def configure_host(self, host):
        super().configure_host(host)
        self.flags(emulated_drivers=['intel_fpga', 'xilinx_fpga'],
                   group='cyborg_fake')

    def setUp(self):
        super().setUp()
        # The plain flavor of the QAT run is kept: a server may resize
        # to or from no accelerator.
        self.flavors = [
            self.vgpu_flavor,
            self.bitstream_flavor('pac-dma', 'dma'),
            self.bitstream_flavor('pac-nlb3', 'nlb3'),
            self.flavors[-1],
        ]
        self.functions = {'pac-dma': fakes.hexid(fakes.DMA_AFU),
                          'pac-nlb3': fakes.hexid(fakes.NLB3)}

    def check_up_hosts(self):
        super().check_up_hosts()
        usage = self.usage()
        for host in self.hosts:
            if host in self.down:
                continue
            held = {r.unit for r in self.store(host).all()
                    if r.unit.startswith('0000:41:')}
            self.assertEqual(set(), held - self.made(host),
                             'vGPU units held on %s but not made' % host)
        for server in self.servers():
            wanted = self.functions.get(server['flavor']['original_name'])
            host = server['OS-EXT-SRV-ATTR:host']
            if (wanted is None or host in self.down
                    or server['status'] not in ('ACTIVE', 'VERIFY_RESIZE')):
                continue
            for rp, consumers in usage.items():
                on, address = self.providers[rp]
                if on == host and server['id'] in consumers and (
                        address in (test_programming_moves.PAC0,
                                    test_programming_moves.PAC1)):
                    self.assertEqual(wanted, self.loaded(host, address),
                                     'server %s holds %s on %s without '
                                     'its function' % (server['id'],
                                                       address, host))
