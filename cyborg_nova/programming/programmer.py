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

"""The reprogramming of FPGAs: validation, the steps, recovery.

:mod:`cyborg_nova.programming` describes the steps and what they
guarantee.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import logging
import os
import socket
import threading
import time
from typing import Callable, Iterable
import uuid as uuid_lib

from cyborg_drivers import base
from cyborg_drivers import bitstreams
from cyborg_drivers import discovery
from cyborg_drivers import names
from cyborg_drivers import sysfs
from cyborg_nova import fencing
from cyborg_nova.programming.journal import CHECKED
from cyborg_nova.programming.journal import CREATED
from cyborg_nova.programming.journal import DONE
from cyborg_nova.programming.journal import FAILED
from cyborg_nova.programming.journal import FAILED_STEP
from cyborg_nova.programming.journal import FAILING
from cyborg_nova.programming.journal import FENCED
from cyborg_nova.programming.journal import FENCING
from cyborg_nova.programming.journal import Job
from cyborg_nova.programming.journal import JobLock
from cyborg_nova.programming.journal import Journal
from cyborg_nova.programming.journal import PROGRAMMED
from cyborg_nova.programming.journal import PROGRAMMING
from cyborg_nova.programming.journal import ProgrammingError
from cyborg_nova.programming.journal import REFUSED
from cyborg_nova.programming.journal import Refused
from cyborg_nova.programming.journal import ROLLED_BACK
from cyborg_nova.programming.journal import ROLLING_BACK
from cyborg_nova.programming.journal import RUNNING
from cyborg_nova.programming.journal import SUCCEEDED
from cyborg_nova.programming.journal import TRAITS_SWAPPED
from cyborg_nova.programming.journal import UNFENCING
from cyborg_nova.programming.journal import VERIFIED
from cyborg_nova.programming.placement import PlacementOps
from cyborg_nova import providers
from cyborg_nova import state as state_store

LOG = logging.getLogger(__name__)

#: On a provider whose programming failed (fenced, state ``failed``).
FAILED_TRAIT = 'CUSTOM_FPGA_PROGRAMMING_FAILED'

#: The function trait the bundled drivers report, by bitstream kind
#: (created while the load runs: the swap needs it right after).
_FUNCTION_TRAITS = {bitstreams.GBS: 'FPGA_FUNCTION_ID_INTEL',
                    bitstreams.XCLBIN: 'FPGA_FUNCTION_ID_XILINX'}

#: Loads tried for one job (a resumed job whose load was interrupted
#: loads again once).
MAX_ATTEMPTS = 2


class _Stalled(ProgrammingError):
    """Placement cannot be written now; the job waits for recovery."""


class _Allocated(Exception):
    """Consumers found on a provider that should have none."""


@dataclasses.dataclass(frozen=True)
class _Plan:
    accelerator: object
    driver: base.AcceleratorDriver
    region: object
    header: bitstreams.Bitstream


class Programmer:
    """Reprograms the FPGAs of this host.

    :param conf: reads ``[cyborg_nova]`` (``bitstream_dir``,
        ``program_timeout``, ``program_concurrency``, ``state_path``).
    :param store: the host's state store.
    :param client: a keystoneauth adapter for Placement, or None (then
        every request is refused: unallocated cannot be proven).
    :param drivers: the loaded drivers, or a callable returning them
        (the agent's change when drivers are installed).
    :param sysfs_root: what discovery reads.
    :param privileged_setup: called once before the first load (e.g. to
        configure and start the privsep daemon), in a worker thread:
        import oslo.privsep in the main thread first (its eventlet import
        in a worker leaves that worker unjoinable).
    :param on_finished: called with each job that finished.
    """

    def __init__(self, conf, store: state_store.StateStore, client,
                 drivers, sysfs_root: str,
                 privileged_setup: Callable[[], object] | None = None,
                 on_finished: Callable[[Job], object] | None = None,
                 lock_dir: str | None = None) -> None:
        opts = conf.cyborg_nova
        self.bitstream_dir = opts.bitstream_dir
        self.timeout = opts.program_timeout
        self.concurrency = opts.program_concurrency
        self.store = store
        self.journal = Journal(store)
        self.client = client
        self.fencer = fencing.Fencer(client) if client is not None else None
        self.placement = PlacementOps(client) if client is not None else (
            None)
        self._drivers = drivers if callable(drivers) else (lambda: drivers)
        self.sysfs_root = sysfs_root
        self._privileged_setup = privileged_setup
        self._setup_lock = threading.Lock()
        self._set_up = privileged_setup is None
        self.on_finished = on_finished
        self.lock_dir = lock_dir or os.path.join(
            os.path.dirname(os.path.abspath(store.path)), 'program-locks')
        os.makedirs(self.lock_dir, mode=0o700, exist_ok=True)
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        # Job id -> the device as last read (see _device).
        self._known: dict = {}
        # Job id -> what this process last read from or wrote to the
        # provider ('inventory': (generation, records) after the fence,
        # 'traits': (generation, traits) read during the load,
        # 'generation' after the trait swap). A write starts from them
        # instead of reading again; a conflict makes it read. Never
        # journaled: a resumed job reads everything afresh.
        self._seen: dict[str, dict] = {}
        # A job journals many steps; without this, each would checkpoint
        # the WAL (see StateStore.keep_open).
        self._keeper = store.keep_open()
        self.owner = '%d@%s' % (os.getpid(), socket.gethostname())

    # -- the public API ------------------------------------------------------

    def program(self, nodename: str, device: str, bitstream: str,
                region: str | None = None, job_id: str | None = None,
                consumer: str | None = None) -> Job:
        """Reprogram ``device`` with ``bitstream``; the finished job.

        :param device: PCI address, provider uuid or provider name.
        :param bitstream: a name under ``[cyborg_nova] bitstream_dir``.
        :param consumer: the one consumer (the instance being spawned)
            whose allocation of the device does not refuse the job.
        :raises Refused: nothing was touched (see :class:`Refused`).
        """
        job, lock = self._submit(nodename, device, bitstream, region,
                                 job_id, consumer)
        return self._run(job, lock)

    def start(self, nodename: str, device: str, bitstream: str,
              region: str | None = None, job_id: str | None = None) -> Job:
        """Validate and journal a job, run it in the background; the job.

        With the ``job_id`` of an existing job, that job is returned and
        nothing else is done (so a caller can safely retry).

        :raises Refused: nothing was touched.
        """
        if job_id is not None:
            existing = self.journal.get(job_id)
            if existing is not None:
                same = (existing.nodename, existing.bitstream) == (
                    nodename, self.library_file(bitstream)) and device in (
                    existing.address, existing.provider,
                    providers.provider_name(nodename, existing.address))
                if not same:
                    raise Refused(409, 'job %s exists for another device '
                                  'or bitstream' % job_id)
                return existing
        job, lock = self._submit(nodename, device, bitstream, region,
                                 job_id, None)
        self._executor().submit(self._run, job, lock)
        return job

    def program_many(self, nodename: str, devices: Iterable[str],
                     bitstream: str, region: str | None = None,
                     concurrency: int | None = None
                     ) -> dict[str, Job | Refused]:
        """Program several devices, at most ``concurrency`` at a time."""
        devices = list(dict.fromkeys(devices))
        if not devices:
            return {}
        outcome: dict[str, Job | Refused] = {}

        def one(device):
            try:
                return self.program(nodename, device, bitstream, region)
            except Refused as exc:
                return exc
        workers = min(concurrency or self.concurrency, len(devices))
        with concurrent.futures.ThreadPoolExecutor(
                workers, thread_name_prefix='program') as pool:
            for device, result in zip(devices, pool.map(one, devices)):
                outcome[device] = result
        return outcome

    def free_fpgas(self, nodename: str, bitstream: str
                   ) -> tuple[list[str], dict[str, str]]:
        """The devices ``bitstream`` fits: free ones, and held ones.

        Returns the addresses of those no instance holds, and the others
        with why they are left out.

        :raises Refused: a bad or unknown bitstream, no Placement.
        """
        header = self._bitstream(self.library_file(bitstream))
        self._need_placement()
        free, skipped = [], {}
        for address, acc in sorted(self._discover().items()):
            if not any(r.interface_id == header.interface_id
                       for r in acc.fpga_regions):
                continue
            consumers, _ = self.placement.allocations(
                providers.provider_uuid(nodename, address))
            if consumers:
                skipped[address] = 'allocated to instance(s) %s' % (
                    ', '.join(sorted(consumers)))
            else:
                free.append(address)
        return free, skipped

    def job(self, job_id: str) -> Job | None:
        return self.journal.get(job_id)

    def recover(self) -> list[Job]:
        """Finish the jobs whose process died (their lock is free)."""
        done = []
        for job in self.journal.unfinished():
            lock = JobLock(self.lock_dir, job.id)
            if not lock.acquire(blocking=False):
                continue
            current = self.journal.get(job.id)
            if current is None or current.finished:
                lock.release(remove=True)
                continue
            LOG.warning('Resuming programming job %s of %s at step %s '
                        '(its process stopped)', job.id, job.address,
                        current.step)
            done.append(self._run(current, lock, resumed=True))
        return done

    def close(self) -> None:
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False)
                self._pool = None
        self._keeper.close()

    # -- validation ----------------------------------------------------------

    def _executor(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    self.concurrency, thread_name_prefix='program')
            return self._pool

    def _need_placement(self) -> None:
        if self.placement is None:
            raise Refused(409, 'programming needs Placement ([placement] '
                          'credentials) to fence the device and prove it '
                          'unallocated')

    def _discover(self) -> dict:
        try:
            return discovery.Discoverer(
                self._drivers(), self.sysfs_root).discover().by_address()
        except sysfs.NoSysfs as exc:
            LOG.error('Programming finds no device: %s', exc)
            return {}

    def library_file(self, name: object) -> object:
        """The file of library entry ``name``; a file name as it is.

        :raises Refused: the library's manifest is broken.
        """
        try:
            return bitstreams.file_of(self.bitstream_dir, name)
        except bitstreams.InvalidManifest as exc:
            raise Refused(409, 'the bitstream library is broken: %s' % exc)

    def _bitstream(self, name: str) -> bitstreams.Bitstream:
        try:
            return bitstreams.load(self.bitstream_dir, name)[1]
        except bitstreams.Outside as exc:
            raise Refused(409, str(exc))
        except bitstreams.BadName as exc:
            raise Refused(400, str(exc))
        except bitstreams.NotFound as exc:
            raise Refused(404, str(exc))
        except bitstreams.InvalidBitstream as exc:
            raise Refused(409, 'not a usable bitstream: %s' % exc)

    @staticmethod
    def _find(nodename: str, device: str, found: dict):
        if device in found:
            return found[device]
        for address, acc in found.items():
            if device in (providers.provider_uuid(nodename, address),
                          providers.provider_name(nodename, address)):
                return acc
        raise Refused(404, 'no accelerator %s on %s (a PCI address, '
                      'provider uuid or provider name)' % (device, nodename))

    def plan(self, nodename: str, device: str, bitstream: str,
             region: str | None = None) -> _Plan:
        """Everything validation checks, before anything is touched.

        :param bitstream: a file name under the bitstream directory (see
            :meth:`library_file` for library entries).

        :raises Refused: see :class:`Refused`.
        """
        header = self._bitstream(bitstream)
        acc = self._find(nodename, device, self._discover())
        drivers = {d.name: d for d in self._drivers()}
        driver = drivers.get(acc.driver)
        if not acc.fpga_regions or driver is None or (
                type(driver).program is base.AcceleratorDriver.program):
            raise Refused(409, '%s (%s, %s) is not an FPGA region this '
                          'host\'s drivers can program'
                          % (acc.address, acc.driver, acc.device_type))
        kind = (bitstreams.XCLBIN if acc.fpga_regions[0].layout == 'xrt'
                else bitstreams.GBS)
        if header.kind != kind:
            raise Refused(409, 'bitstream %s is a %s; %s takes a %s'
                          % (bitstream, header.kind, acc.address, kind))
        regions = [r for r in acc.fpga_regions
                   if region is None or r.name == region]
        if not regions:
            raise Refused(404, '%s has no FPGA region %s' % (acc.address,
                                                             region))
        fits = [r for r in regions if r.interface_id == header.interface_id]
        if not fits:
            raise Refused(409, 'bitstream %s was built for interface %s; '
                          '%s offers %s: incompatible, nothing was changed'
                          % (bitstream, header.interface_id, acc.address,
                             ', '.join('%s (region %s)' % (
                                 r.interface_id or 'no interface id',
                                 r.name) for r in regions)))
        if fits[0].layout in ('opae', 'dfl') and acc.sriov and (
                acc.sriov.num_vfs):
            raise Refused(409, 'the FPGA port of %s is on its VF (%d VFs '
                          'enabled); disable SR-IOV first'
                          % (acc.address, acc.sriov.num_vfs))
        return _Plan(acc, driver, fits[0], header)

    def _submit(self, nodename, device, bitstream, region, job_id,
                consumer) -> tuple[Job, JobLock]:
        self._need_placement()
        bitstream = self.library_file(bitstream)
        plan = self.plan(nodename, device, bitstream, region)
        acc = plan.accelerator
        rows = self.store.sync(nodename, [acc], state_store.INACTIVE)
        row = rows[acc.address]
        if row.state == state_store.HELD:
            raise Refused(409, '%s is held (%s); release it first'
                          % (acc.address, row.reason or 'no reason'))
        active = self.journal.active(nodename, acc.address)
        if active is not None:
            # Its process may have died: finish it first if so.
            self.recover()
            row = self.store.devices(nodename)[acc.address]
        prev_state, prev_reason = row.state, row.reason
        target = prev_state
        if prev_state in (state_store.PROGRAMMING, state_store.FAILED):
            last = [j for j in self.journal.jobs(nodename, acc.address, 5)
                    if j.status in (FAILED, REFUSED)]
            target = last[0].target_state if last else (
                state_store.INACTIVE)
        now = time.time()
        job = Job(
            id=job_id or str(uuid_lib.uuid4()), nodename=nodename,
            address=acc.address,
            provider=providers.provider_uuid(nodename, acc.address),
            driver=acc.driver, region=plan.region.name, bitstream=bitstream,
            kind=plan.header.kind, interface_id=plan.header.interface_id,
            function_id=plan.header.function_id,
            old_function_id=plan.region.function_id, prev_state=prev_state,
            prev_reason=prev_reason, target_state=target, step=CREATED,
            status=RUNNING, error=None, attempts=0, owner=self.owner,
            created_at=now, updated_at=now, finished_at=None,
            consumer=consumer, steps=((CREATED, now, None),))
        lock = JobLock(self.lock_dir, job.id)
        lock.acquire()
        try:
            self.journal.create(job)
        except BaseException:
            lock.release(remove=True)
            raise
        self._known[job.id] = acc
        LOG.info('Programming job %s: %s region %s with %s (function %s, '
                 'was %s)', job.id, job.address, job.region, bitstream,
                 job.function_id, job.old_function_id)
        return job, lock

    # -- running -------------------------------------------------------------

    def _run(self, job: Job, lock: JobLock, resumed: bool = False) -> Job:
        try:
            if not job.steps:
                job = self.journal.get(job.id)
            while not job.finished:
                job = self._advance(job)
        except _Stalled as exc:
            LOG.warning('Programming job %s of %s waits at step %s: %s; it '
                        'is resumed by the next recovery', job.id,
                        job.address, job.step, exc)
            return self.journal.get(job.id)
        except Exception:
            LOG.exception('Programming job %s of %s stopped at step %s',
                          job.id, job.address, job.step)
            raise
        finally:
            lock.release(remove=job.finished)
            self._known.pop(job.id, None)
            self._seen.pop(job.id, None)
        LOG.log(logging.INFO if job.status == SUCCEEDED else logging.ERROR,
                'Programming job %s of %s: %s%s', job.id, job.address,
                job.status, ': %s' % job.error if job.error else '')
        if self.on_finished is not None:
            try:
                self.on_finished(job)
            except Exception:
                LOG.exception('After programming job %s', job.id)
        return job

    def _advance(self, job: Job) -> Job:
        step = job.step
        if step in (CREATED, FENCING):
            return self._fence(job)
        if step == FENCED:
            return self._check(job)
        if step == CHECKED:
            return self._load(job)
        if step == PROGRAMMING:
            return self._interrupted_load(job)
        if step == PROGRAMMED:
            return self._verify(job)
        if step == VERIFIED:
            return self._swap(job)
        if step in (TRAITS_SWAPPED, UNFENCING):
            return self._unfence(job)
        if step == FAILING:
            return self._fail(job, job.error or 'failed')
        if step == ROLLING_BACK:
            return self._rollback(job, job.error or 'refused')
        raise ProgrammingError('job %s is at unknown step %r'
                               % (job.id, step))

    def _device(self, job: Job, fresh: bool = False):
        """The device of ``job`` as sysfs shows it (None: gone).

        Read once and reused until the load may have changed it
        (``fresh``, or after a load).
        """
        if not fresh and job.id in self._known:
            return self._known[job.id]
        acc = self._discover().get(job.address)
        self._known[job.id] = acc
        return acc

    def _loaded(self, acc, job: Job) -> str | None:
        for region in (acc.fpga_regions if acc is not None else ()):
            if region.name == job.region:
                return region.function_id
        return None

    def _apply(self, job: Job, state: str, acc,
               known=None) -> fencing.FenceResult:
        result = self.fencer.apply(job.address, job.provider, state, acc,
                                   known=known)
        if result.generation is not None:
            self._seen.setdefault(job.id, {})['inventory'] = (
                result.generation, result.inventories)
        return result

    def _fence(self, job: Job) -> Job:
        job = self.journal.step(job, FENCING)
        self.store.set_state(job.nodename, job.address,
                             state_store.PROGRAMMING,
                             'programming job %s: loading %s'
                             % (job.id, job.bitstream))
        acc = self._device(job)
        if acc is None:
            return self._rollback(job, 'the device is gone')
        result = self._apply(job, state_store.PROGRAMMING, acc)
        if result.outcome == fencing.FAILED:
            return self._rollback(job, 'cannot fence provider %s: %s'
                                  % (job.provider, result.error))
        return self.journal.step(job, FENCED, detail=json.dumps(
            {'outcome': result.outcome, 'reserved': result.reserved}))

    def _check(self, job: Job) -> Job:
        """No allocation on the fenced provider (none can land now)."""
        try:
            consumers, generation = self.placement.allocations(job.provider)
        except ProgrammingError as exc:
            return self._rollback(job, 'cannot prove %s unallocated: %s'
                                  % (job.address, exc))
        consumers = set(consumers) - {job.consumer}
        if consumers:
            return self._rollback(job, '%s is allocated to instance(s) %s;'
                                  ' nothing was changed' % (
                                      job.address,
                                      ', '.join(sorted(consumers))))
        return self.journal.step(job, CHECKED, detail=json.dumps(
            {'generation': generation}))

    def _load(self, job: Job) -> Job:
        acc = self._device(job)
        if acc is None:
            return self._fail(job, 'the device is gone')
        driver = {d.name: d for d in self._drivers()}.get(job.driver)
        if driver is None:
            return self._fail(job, 'driver %s is not loaded' % job.driver)
        job = self.journal.step(job, PROGRAMMING, attempts=job.attempts + 1)
        try:
            self._setup_privileged()
        except Exception as exc:
            return self._fail(job, 'cannot start the privileged helper: %s'
                              % exc)
        started = time.monotonic()
        error = self._call_driver(driver, acc, job, overlap=lambda: (
            self._precreate(job)))
        self._known.pop(job.id, None)
        if error:
            return self._fail(job, error)
        return self.journal.step(job, PROGRAMMED, detail=json.dumps(
            {'seconds': round(time.monotonic() - started, 6)}))

    def _precreate(self, job: Job) -> None:
        """What the swap needs, while the load runs.

        The new function's trait is created and the provider's traits
        are read, so the swap after the load is one write.
        """
        prefix = _FUNCTION_TRAITS.get(job.kind)
        try:
            if prefix:
                self.placement.create_traits([names.custom(
                    prefix, names.hex_id(job.function_id))])
            read = self.placement.traits(job.provider)
        except ProgrammingError as exc:
            LOG.debug('Preparing the trait swap of %s later: %s', job.id,
                      exc)
            return
        if read is not None:
            self._seen.setdefault(job.id, {})['traits'] = read

    def _call_driver(self, driver, acc, job: Job,
                     overlap: Callable[[], None] | None = None
                     ) -> str | None:
        """Run the driver's load; why it failed, or None.

        ``overlap`` runs meanwhile, in this thread.
        """
        box: list = []

        def target():
            try:
                driver.program(acc, job.region, job.bitstream)
                box.append(None)
            except Exception as exc:
                box.append(exc)
        thread = threading.Thread(target=target, daemon=True,
                                  name='load-%s' % job.address)
        thread.start()
        deadline = time.monotonic() + self.timeout
        if overlap is not None:
            overlap()
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            return 'the load did not finish within %s s' % self.timeout
        if box[0] is not None:
            exc = box[0]
            return 'the load failed: %s' % (exc if isinstance(
                exc, base.DriverError) else '%s: %s' % (
                    type(exc).__name__, exc))
        return None

    def _setup_privileged(self) -> None:
        with self._setup_lock:
            if not self._set_up:
                self._privileged_setup()
                self._set_up = True

    def _interrupted_load(self, job: Job) -> Job:
        """A load whose process died: done, to retry, or failed."""
        loaded = self._loaded(self._device(job, fresh=True), job)
        if loaded == job.function_id:
            return self.journal.step(job, PROGRAMMED,
                                     detail='found loaded after a restart')
        if job.attempts < MAX_ATTEMPTS:
            # Still fenced; the check runs again before the next load.
            return self.journal.step(job, FENCED,
                                     detail='load interrupted (%s loaded);'
                                     ' trying again' % loaded)
        return self._fail(job, 'the load was interrupted %d times; %s is '
                          'loaded' % (job.attempts, loaded))

    def _verify(self, job: Job) -> Job:
        acc = self._device(job, fresh=True)
        loaded = self._loaded(acc, job)
        if loaded != job.function_id:
            return self._fail(job, 'verification failed: region %s shows '
                              'function %s, not %s' % (
                                  job.region, loaded, job.function_id))
        return self.journal.step(job, VERIFIED)

    def _sync_traits(self, job: Job, acc, add=frozenset(),
                     remove=frozenset(), **check) -> None:
        """Write the provider's traits as Nova's update computes them.

        Plus ``add``, less ``remove``; the store's owned traits likewise.
        """
        row = self.store.devices(job.nodename).get(job.address)
        owned = (set(acc.traits) | {providers.OWNER_TRAIT}
                 if acc is not None else set())
        previous = set(row.owned_traits) if row else set()
        stale = previous - owned if acc is not None else set()
        seen = self._seen.setdefault(job.id, {})
        try:
            found = self.placement.replace_traits(
                job.provider, owned, stale, set(add), set(remove),
                read=seen.pop('traits', None), **check)
        except ProgrammingError as exc:
            raise _Stalled(str(exc))
        now = None
        if found is not None:
            now, seen['generation'] = found
        if acc is not None and row is not None:
            remembered = owned | (stale & (now or set()))
            if remembered != previous:
                self.store.set_owned_traits(job.nodename, job.address,
                                            remembered)

    def _swap(self, job: Job) -> Job:
        acc = self._device(job)
        if self._loaded(acc, job) != job.function_id:
            return self._fail(job, 'the device changed after it was '
                              'verified')
        checked = [json.loads(d) for s, _, d in job.steps
                   if s == CHECKED and d]

        def changed():
            # The provider changed since it was proven unallocated (Nova's
            # update, or worse): prove it again before the write.
            consumers, _ = self.placement.allocations(job.provider)
            consumers = set(consumers) - {job.consumer}
            if consumers:
                raise _Allocated(sorted(consumers))
        try:
            self._sync_traits(
                job, acc, remove={FAILED_TRAIT}, changed=changed,
                unchanged_since=checked[-1]['generation'] if checked
                else None)
        except _Allocated as exc:
            return self._fail(job, 'allocated to instance(s) %s while '
                              'fenced' % ', '.join(exc.args[0]))
        return self.journal.step(job, TRAITS_SWAPPED)

    def _unfence(self, job: Job) -> Job:
        if job.step != UNFENCING:
            job = self.journal.step(job, UNFENCING)
        reason = job.prev_reason if job.target_state == job.prev_state \
            else 'programmed by job %s' % job.id
        self.store.set_state(job.nodename, job.address, job.target_state,
                             reason)
        seen = self._seen.get(job.id, {})
        known = None
        if 'generation' in seen and 'inventory' in seen:
            # The provider as the fence left it, at the generation the
            # trait swap gave it: unless someone wrote in between, the
            # unfence is one write.
            known = (seen['generation'], seen['inventory'][1])
        result = self._apply(job, job.target_state, self._device(job),
                             known=known)
        if result.outcome == fencing.FAILED:
            raise _Stalled('cannot unfence: %s' % result.error)
        return self.journal.step(job, DONE, status=SUCCEEDED, detail=(
            json.dumps({'reserved': result.reserved})))

    def _fail(self, job: Job, error: str) -> Job:
        """Leave the device fenced, ``failed``, with :data:`FAILED_TRAIT`."""
        at = job.step if job.step != FAILING else None
        if job.step != FAILING:
            error = 'failed at step %s: %s' % (at, error)
            job = self.journal.step(job, FAILING, error=error)
        self.store.set_state(job.nodename, job.address, state_store.FAILED,
                             'programming job %s %s' % (job.id, error))
        acc = self._device(job)
        result = self._apply(job, state_store.FAILED, acc)
        if result.outcome == fencing.FAILED:
            raise _Stalled('cannot fence the failed device: %s'
                           % result.error)
        self._sync_traits(job, acc, add={FAILED_TRAIT})
        return self.journal.step(job, FAILED_STEP, status=FAILED)

    def _rollback(self, job: Job, reason: str) -> Job:
        """Back to how it was (nothing was loaded): unfence, refuse."""
        if job.step != ROLLING_BACK:
            job = self.journal.step(job, ROLLING_BACK, error=reason)
        self.store.set_state(job.nodename, job.address, job.prev_state,
                             job.prev_reason)
        result = self._apply(job, job.prev_state, self._device(job))
        if result.outcome == fencing.FAILED:
            raise _Stalled('cannot unfence: %s' % result.error)
        return self.journal.step(job, ROLLED_BACK, status=REFUSED)
