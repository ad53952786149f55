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

"""Fencing the device, proving it unallocated, and unfencing it.

Steps 2, 3 and 7 of :mod:`cyborg_nova.programming`: the device's state
becomes ``programming`` and its provider fully ``reserved``
(generation-checked, the agent's Fencer); then the provider must have no
allocation but the job's consumer's; at the end the device gets its state
back, and its provider the ``reserved`` that state gives.
"""

from __future__ import annotations

import json

from cyborg_nova import fencing
from cyborg_nova.programming.journal import CHECKED
from cyborg_nova.programming.journal import DONE
from cyborg_nova.programming.journal import FENCED
from cyborg_nova.programming.journal import FENCING
from cyborg_nova.programming.journal import Job
from cyborg_nova.programming.journal import ProgrammingError
from cyborg_nova.programming.journal import SUCCEEDED
from cyborg_nova.programming.journal import UNFENCING
from cyborg_nova.programming.steps.context import Context
from cyborg_nova.programming.steps.context import Stalled
from cyborg_nova.programming.steps.failure import rollback
from cyborg_nova import store as state_store


def fence(ctx: Context, job: Job) -> Job:
    """Fence the device; rolled back if it is gone or cannot be fenced."""
    job = ctx.journal.step(job, FENCING)
    ctx.store.set_state(job.nodename, job.address, state_store.PROGRAMMING,
                        'programming job %s: loading %s'
                        % (job.id, job.bitstream))
    acc = ctx.device(job)
    if acc is None:
        return rollback(ctx, job, 'the device is gone')
    result = ctx.apply(job, state_store.PROGRAMMING, acc)
    if result.outcome == fencing.FAILED:
        return rollback(ctx, job, 'cannot fence provider %s: %s'
                        % (job.provider, result.error))
    return ctx.journal.step(job, FENCED, detail=json.dumps(
        {'outcome': result.outcome, 'reserved': result.reserved}))


def check(ctx: Context, job: Job) -> Job:
    """No allocation on the fenced provider (none can land now)."""
    try:
        consumers, generation = ctx.placement.allocations(job.provider)
    except ProgrammingError as exc:
        return rollback(ctx, job, 'cannot prove %s unallocated: %s'
                        % (job.address, exc))
    consumers = set(consumers) - {job.consumer}
    if consumers:
        return rollback(ctx, job, '%s is allocated to instance(s) %s;'
                        ' nothing was changed' % (
                            job.address, ', '.join(sorted(consumers))))
    return ctx.journal.step(job, CHECKED, detail=json.dumps(
        {'generation': generation}))


def unfence(ctx: Context, job: Job) -> Job:
    """The device's state back, its provider's ``reserved`` with it.

    :raises Stalled: Placement cannot be written now.
    """
    if job.step != UNFENCING:
        job = ctx.journal.step(job, UNFENCING)
    reason = job.prev_reason if job.target_state == job.prev_state \
        else 'programmed by job %s' % job.id
    ctx.store.set_state(job.nodename, job.address, job.target_state,
                        reason)
    seen = ctx.seen.get(job.id, {})
    known = None
    if 'generation' in seen and 'inventory' in seen:
        # The provider as the fence left it, at the generation the
        # trait swap gave it: unless someone wrote in between, the
        # unfence is one write.
        known = (seen['generation'], seen['inventory'][1])
    result = ctx.apply(job, job.target_state, ctx.device(job), known=known)
    if result.outcome == fencing.FAILED:
        raise Stalled('cannot unfence: %s' % result.error)
    return ctx.journal.step(job, DONE, status=SUCCEEDED, detail=(
        json.dumps({'reserved': result.reserved})))
