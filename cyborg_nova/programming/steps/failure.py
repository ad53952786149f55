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

"""The two ways a job ends without its bitstream: failed, or refused.

Before the load (nothing was loaded) a job is rolled back: the device
gets its state back, the job is ``refused``. From the load on, it fails:
the device stays fenced, in the ``failed`` state, with
:data:`FAILED_TRAIT` on its provider.
"""

from __future__ import annotations

from cyborg_nova import fencing
from cyborg_nova.programming.journal import FAILED
from cyborg_nova.programming.journal import FAILED_STEP
from cyborg_nova.programming.journal import FAILING
from cyborg_nova.programming.journal import Job
from cyborg_nova.programming.journal import REFUSED
from cyborg_nova.programming.journal import ROLLED_BACK
from cyborg_nova.programming.journal import ROLLING_BACK
from cyborg_nova.programming.steps.context import Context
from cyborg_nova.programming.steps.context import Stalled
from cyborg_nova import store as state_store

#: On a provider whose programming failed (fenced, state ``failed``).
FAILED_TRAIT = 'CUSTOM_FPGA_PROGRAMMING_FAILED'


def fail(ctx: Context, job: Job, error: str) -> Job:
    """Leave the device fenced, ``failed``, with :data:`FAILED_TRAIT`.

    :raises Stalled: Placement cannot be written now.
    """
    at = job.step if job.step != FAILING else None
    if job.step != FAILING:
        error = 'failed at step %s: %s' % (at, error)
        job = ctx.journal.step(job, FAILING, error=error)
    ctx.store.set_state(job.nodename, job.address, state_store.FAILED,
                        'programming job %s %s' % (job.id, error))
    acc = ctx.device(job)
    result = ctx.apply(job, state_store.FAILED, acc)
    if result.outcome == fencing.FAILED:
        raise Stalled('cannot fence the failed device: %s' % result.error)
    ctx.sync_traits(job, acc, add={FAILED_TRAIT})
    return ctx.journal.step(job, FAILED_STEP, status=FAILED)


def rollback(ctx: Context, job: Job, reason: str) -> Job:
    """Back to how it was (nothing was loaded): unfence, refuse.

    :raises Stalled: Placement cannot be written now.
    """
    if job.step != ROLLING_BACK:
        job = ctx.journal.step(job, ROLLING_BACK, error=reason)
    ctx.store.set_state(job.nodename, job.address, job.prev_state,
                        job.prev_reason)
    result = ctx.apply(job, job.prev_state, ctx.device(job))
    if result.outcome == fencing.FAILED:
        raise Stalled('cannot unfence: %s' % result.error)
    return ctx.journal.step(job, ROLLED_BACK, status=REFUSED)
