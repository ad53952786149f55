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

"""Swapping the function trait on the provider.

Step 6 of :mod:`cyborg_nova.programming`: the provider's traits become
the values Nova's update computes for what is now loaded
(generation-checked; trait definitions are never deleted), and the store
records the owned traits as Nova's update does. If the provider changed
since it was proven unallocated, its allocations are read again first.
"""

from __future__ import annotations

import json

from cyborg_nova.programming.journal import CHECKED
from cyborg_nova.programming.journal import Job
from cyborg_nova.programming.journal import TRAITS_SWAPPED
from cyborg_nova.programming.steps.context import Context
from cyborg_nova.programming.steps.failure import fail
from cyborg_nova.programming.steps.failure import FAILED_TRAIT


class _Allocated(Exception):
    """Consumers found on a provider that should have none."""


def swap(ctx: Context, job: Job) -> Job:
    """The function trait swapped; failed if the device changed.

    :raises Stalled: Placement cannot be written now.
    """
    acc = ctx.device(job)
    if ctx.loaded(acc, job) != job.function_id:
        return fail(ctx, job, 'the device changed after it was verified')
    checked = [json.loads(d) for s, _, d in job.steps
               if s == CHECKED and d]

    def changed():
        # The provider changed since it was proven unallocated (Nova's
        # update, or worse): prove it again before the write.
        consumers, _ = ctx.placement.allocations(job.provider)
        consumers = set(consumers) - {job.consumer}
        if consumers:
            raise _Allocated(sorted(consumers))
    try:
        ctx.sync_traits(
            job, acc, remove={FAILED_TRAIT}, changed=changed,
            unchanged_since=checked[-1]['generation'] if checked else None)
    except _Allocated as exc:
        return fail(ctx, job, 'allocated to instance(s) %s while fenced'
                    % ', '.join(exc.args[0]))
    return ctx.journal.step(job, TRAITS_SWAPPED)
