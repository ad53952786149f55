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

"""The reprogramming of FPGAs: jobs submitted, run, and recovered.

:mod:`cyborg_nova.programming` describes the steps and what they
guarantee; :mod:`.validation` checks a request, :mod:`.steps` holds the
actions of the steps.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import socket
import threading
import time
from typing import Callable, Iterable
import uuid as uuid_lib

from cyborg_nova import fencing
from cyborg_nova import notifications
from cyborg_nova.programming.journal import CREATED
from cyborg_nova.programming.journal import FAILED
from cyborg_nova.programming.journal import Job
from cyborg_nova.programming.journal import JobLock
from cyborg_nova.programming.journal import Journal
from cyborg_nova.programming.journal import REFUSED
from cyborg_nova.programming.journal import Refused
from cyborg_nova.programming.journal import RUNNING
from cyborg_nova.programming.journal import SUCCEEDED
from cyborg_nova.programming.placement import PlacementOps
from cyborg_nova.programming.steps.context import Context
from cyborg_nova.programming.steps.context import Stalled
from cyborg_nova.programming.steps import dispatch
from cyborg_nova.programming.validation import Plan
from cyborg_nova.programming.validation import Validator
from cyborg_nova import providers
from cyborg_nova import store as state_store

LOG = logging.getLogger(__name__)


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
    :param notifier: sends ``accelerator.programmed`` for each job that
        succeeded; None: nothing is sent.
    """

    def __init__(self, conf, store: state_store.StateStore, client,
                 drivers, sysfs_root: str,
                 privileged_setup: Callable[[], object] | None = None,
                 on_finished: Callable[[Job], object] | None = None,
                 lock_dir: str | None = None,
                 notifier: notifications.Notifier | None = None) -> None:
        opts = conf.cyborg_nova
        self.bitstream_dir = opts.bitstream_dir
        self.timeout = opts.program_timeout
        self.concurrency = opts.program_concurrency
        self.store = store
        self.journal = Journal(store)
        self.client = client
        self.fencer = (fencing.Fencer(client, kept=store.units.kept)
                       if client is not None else None)
        self.placement = PlacementOps(client) if client is not None else (
            None)
        self._drivers = drivers if callable(drivers) else (lambda: drivers)
        self.sysfs_root = sysfs_root
        self.validator = Validator(self.bitstream_dir, self._drivers,
                                   sysfs_root)
        self.steps = Context(store, self.journal, self.fencer,
                             self.placement, self._drivers,
                             self.validator.discover, self.timeout,
                             privileged_setup)
        self.on_finished = on_finished
        self.notifier = notifier
        self.lock_dir = lock_dir or os.path.join(
            os.path.dirname(os.path.abspath(store.path)), 'program-locks')
        os.makedirs(self.lock_dir, mode=0o700, exist_ok=True)
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
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
        header = self.validator.bitstream(self.library_file(bitstream))
        self._need_placement()
        free, skipped = [], {}
        for address, acc in sorted(self.validator.discover().items()):
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

    def library_file(self, name: object) -> object:
        """The file of library entry ``name``; a file name as it is.

        :raises Refused: the library's manifest is broken.
        """
        return self.validator.library_file(name)

    def plan(self, nodename: str, device: str, bitstream: str,
             region: str | None = None) -> Plan:
        """Everything validation checks, before anything is touched.

        :param bitstream: a file name under the bitstream directory (see
            :meth:`library_file` for library entries).
        :raises Refused: see :class:`Refused`.
        """
        return self.validator.plan(nodename, device, bitstream, region)

    # -- submitting ----------------------------------------------------------

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
        self.steps.remember(job, acc)
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
                job = dispatch.advance(self.steps, job)
            if job.status == SUCCEEDED:
                self._notify_programmed(job)
        except Stalled as exc:
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
            self.steps.forget(job)
        LOG.log(logging.INFO if job.status == SUCCEEDED else logging.ERROR,
                'Programming job %s of %s: %s%s', job.id, job.address,
                job.status, ': %s' % job.error if job.error else '')
        if self.on_finished is not None:
            try:
                self.on_finished(job)
            except Exception:
                LOG.exception('After programming job %s', job.id)
        return job

    def _notify_programmed(self, job: Job) -> None:
        """``accelerator.programmed``: the device as verified in sysfs."""
        if self.notifier is None or not self.notifier.enabled:
            return
        try:
            acc = self.steps.device(job)
            row = self.store.devices(job.nodename).get(job.address)
            if acc is None:
                return
            self.notifier.emit(
                'programmed', acc, job.nodename,
                row.state if row else None, programming={
                    'job': job.id, 'region': job.region,
                    'bitstream': job.bitstream,
                    'function_id': job.function_id,
                    'previous_function_id': job.old_function_id})
        except Exception:
            # The device is programmed whatever the notification does.
            LOG.exception('Cannot notify that job %s programmed %s',
                          job.id, job.address)
