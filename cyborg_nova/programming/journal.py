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

"""The programming journal: jobs and their steps in the state store.

Each reprogramming is a :class:`Job`. Its steps are journaled, in the
host's state store next to the device states, before each acts, so a
process that dies leaves a journal to finish from; :class:`JobLock`
tells whether the process working on a job is still alive.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import time

from cyborg_nova import store as state_store
from cyborg_nova.store import jobs as job_table

# Steps, in order; each is journaled when reached.
CREATED = 'created'
FENCING = 'fencing'
FENCED = 'fenced'
CHECKED = 'checked'
PROGRAMMING = 'programming'
PROGRAMMED = 'programmed'
VERIFIED = 'verified'
TRAITS_SWAPPED = 'traits-swapped'
UNFENCING = 'unfencing'
DONE = 'done'
FAILING = 'failing'
FAILED_STEP = 'failed'
ROLLING_BACK = 'rolling-back'
ROLLED_BACK = 'rolled-back'
STEPS = (CREATED, FENCING, FENCED, CHECKED, PROGRAMMING, PROGRAMMED,
         VERIFIED, TRAITS_SWAPPED, UNFENCING, DONE, FAILING, FAILED_STEP,
         ROLLING_BACK, ROLLED_BACK)

# Job statuses. The store knows the first: a device may have one running
# job at a time.
RUNNING = job_table.RUNNING
SUCCEEDED = 'succeeded'
FAILED = 'failed'
REFUSED = 'refused'
STATUSES = (RUNNING, SUCCEEDED, FAILED, REFUSED)


class ProgrammingError(Exception):
    """Programming cannot go on; the message says why."""


class Refused(ProgrammingError):
    """Refused before anything was touched.

    :attr:`code` is the HTTP status an API answers with: 400 (a bad
    bitstream name), 404 (no such device or bitstream) or 409 (anything
    else: not programmable, incompatible, busy, no Placement).
    """

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclasses.dataclass(frozen=True)
class Job:
    """One programming job as the journal holds it."""

    id: str
    nodename: str
    address: str
    provider: str
    driver: str
    region: str
    bitstream: str
    kind: str
    interface_id: str
    function_id: str
    old_function_id: str | None
    prev_state: str
    prev_reason: str | None
    target_state: str
    step: str
    status: str
    error: str | None
    attempts: int
    owner: str | None
    created_at: float
    updated_at: float
    finished_at: float | None
    #: The consumer (instance) allowed to hold the device meanwhile: the
    #: one a device is programmed for at spawn. None: nobody.
    consumer: str | None = None
    #: (step, time, detail) in order; only filled by Journal.get.
    steps: tuple[tuple[str, float, str | None], ...] = ()

    @property
    def finished(self) -> bool:
        return self.status != RUNNING

    def step_time(self, step: str) -> float | None:
        """When ``step`` was last reached (None: never)."""
        times = [at for name, at, _ in self.steps if name == step]
        return times[-1] if times else None

    def to_dict(self) -> dict:
        """The API's view of the job."""
        return {
            'id': self.id, 'host': self.nodename, 'device': self.address,
            'provider': self.provider, 'driver': self.driver,
            'region': self.region, 'bitstream': self.bitstream,
            'kind': self.kind, 'interface_id': self.interface_id,
            'function_id': self.function_id,
            'previous_function_id': self.old_function_id,
            'previous_state': self.prev_state, 'step': self.step,
            'status': self.status, 'error': self.error,
            'attempts': self.attempts, 'created_at': self.created_at,
            'updated_at': self.updated_at,
            'finished_at': self.finished_at, 'consumer': self.consumer,
            'steps': [{'step': s, 'at': at, 'detail': d}
                      for s, at, d in self.steps],
        }


class Journal:
    """Programming jobs and their steps, in the host's state store."""

    def __init__(self, store: state_store.StateStore) -> None:
        self.store = store
        self._jobs = store.jobs

    def create(self, job: Job) -> None:
        """Record a new running job.

        :raises Refused: the device already has a running job (409).
        """
        try:
            self._jobs.insert({c: getattr(job, c)
                               for c in job_table.COLUMNS})
        except job_table.DuplicateJob as exc:
            if exc.running is None:
                raise Refused(409, 'job %s exists already' % job.id)
            raise Refused(409, '%s is being programmed by job %s'
                          % (job.address, exc.running))

    def step(self, job: Job, step: str, detail: str | None = None,
             **fields) -> Job:
        """Journal ``step`` (and column changes); the updated job.

        :raises ValueError: a field is not a column of a job.
        """
        now = time.time()
        fields.update(step=step, updated_at=now)
        if fields.get('status', RUNNING) != RUNNING:
            fields['finished_at'] = now
        self._jobs.update(job.id, fields, detail)
        return dataclasses.replace(
            job, steps=job.steps + ((step, now, detail),), **fields)

    def get(self, job_id: str) -> Job | None:
        found = self._jobs.get(job_id)
        if found is None:
            return None
        row, steps = found
        return Job(**row, steps=tuple(steps))

    def active(self, nodename: str, address: str) -> Job | None:
        row = self._jobs.running(nodename, address)
        return None if row is None else Job(**row)

    def unfinished(self) -> list[Job]:
        return [Job(**row) for row in self._jobs.unfinished()]

    def jobs(self, nodename: str | None = None, address: str | None = None,
             limit: int = 50) -> list[Job]:
        """The latest jobs, newest first."""
        return [Job(**row)
                for row in self._jobs.latest(nodename, address, limit)]


class JobLock:
    """An exclusive flock on ``<dir>/<job>.lock``.

    Held while a process works on the job; the kernel releases it when
    that process dies, however it dies.
    """

    def __init__(self, directory: str, job_id: str) -> None:
        self.path = os.path.join(directory, '%s.lock' % job_id)
        self._fd: int | None = None

    def acquire(self, blocking: bool = True) -> bool:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                     0o600)
        try:
            flags = fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB)
            fcntl.flock(fd, flags)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def release(self, remove: bool = False) -> None:
        if self._fd is None:
            return
        if remove:
            try:
                os.unlink(self.path)
            except OSError:
                pass
        os.close(self._fd)
        self._fd = None
