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

"""Which action each journaled step leads to: one job's way forward.

A job is run, or resumed after its process died, by calling
:func:`advance` until it is finished: each call reads the step the
journal last recorded and does what comes next, so a resumed job goes on
forward (fencing and proving the provider unallocated again before any
load).
"""

from __future__ import annotations

from cyborg_nova.programming.journal import CHECKED
from cyborg_nova.programming.journal import CREATED
from cyborg_nova.programming.journal import FAILING
from cyborg_nova.programming.journal import FENCED
from cyborg_nova.programming.journal import FENCING
from cyborg_nova.programming.journal import Job
from cyborg_nova.programming.journal import PROGRAMMED
from cyborg_nova.programming.journal import PROGRAMMING
from cyborg_nova.programming.journal import ProgrammingError
from cyborg_nova.programming.journal import ROLLING_BACK
from cyborg_nova.programming.journal import TRAITS_SWAPPED
from cyborg_nova.programming.journal import UNFENCING
from cyborg_nova.programming.journal import VERIFIED
from cyborg_nova.programming.steps.context import Context
from cyborg_nova.programming.steps import failure
from cyborg_nova.programming.steps import fence
from cyborg_nova.programming.steps import load
from cyborg_nova.programming.steps import traits

#: The action after each step (those after a failure take its error).
_NEXT = {
    CREATED: fence.fence,
    FENCING: fence.fence,
    FENCED: fence.check,
    CHECKED: load.load,
    PROGRAMMING: load.interrupted_load,
    PROGRAMMED: load.verify,
    VERIFIED: traits.swap,
    TRAITS_SWAPPED: fence.unfence,
    UNFENCING: fence.unfence,
}


def advance(ctx: Context, job: Job) -> Job:
    """Do what comes after ``job``'s last step; the job after it.

    :raises Stalled: Placement cannot be written now (the next recovery
        goes on from here).
    :raises ProgrammingError: the job is at a step no action follows.
    """
    step = job.step
    if step in _NEXT:
        return _NEXT[step](ctx, job)
    if step == FAILING:
        return failure.fail(ctx, job, job.error or 'failed')
    if step == ROLLING_BACK:
        return failure.rollback(ctx, job, job.error or 'refused')
    raise ProgrammingError('job %s is at unknown step %r' % (job.id, step))
