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

"""Loading the bitstream, and verifying what sysfs then shows.

Steps 4 and 5 of :mod:`cyborg_nova.programming`: the driver loads the
bitstream (through its privsep helper) within ``[cyborg_nova]
program_timeout``, while the trait the swap will need is prepared; then a
fresh discovery must read the new function back. A load whose process
died is found loaded, loaded again (at most :data:`MAX_ATTEMPTS` loads),
or failed.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Callable

from cyborg_drivers import base
from cyborg_drivers import bitstreams
from cyborg_drivers import names
from cyborg_nova.programming.journal import FENCED
from cyborg_nova.programming.journal import Job
from cyborg_nova.programming.journal import PROGRAMMED
from cyborg_nova.programming.journal import PROGRAMMING
from cyborg_nova.programming.journal import ProgrammingError
from cyborg_nova.programming.journal import VERIFIED
from cyborg_nova.programming.steps.context import Context
from cyborg_nova.programming.steps.failure import fail

LOG = logging.getLogger(__name__)

#: Loads tried for one job (a resumed job whose load was interrupted
#: loads again once).
MAX_ATTEMPTS = 2

#: The function trait the bundled drivers report, by bitstream kind
#: (created while the load runs: the swap needs it right after).
_FUNCTION_TRAITS = {bitstreams.GBS: 'FPGA_FUNCTION_ID_INTEL',
                    bitstreams.XCLBIN: 'FPGA_FUNCTION_ID_XILINX'}


def load(ctx: Context, job: Job) -> Job:
    """Load the bitstream through the driver; failed if it does not."""
    acc = ctx.device(job)
    if acc is None:
        return fail(ctx, job, 'the device is gone')
    driver = {d.name: d for d in ctx.drivers()}.get(job.driver)
    if driver is None:
        return fail(ctx, job, 'driver %s is not loaded' % job.driver)
    job = ctx.journal.step(job, PROGRAMMING, attempts=job.attempts + 1)
    try:
        ctx.setup_privileged()
    except Exception as exc:
        return fail(ctx, job, 'cannot start the privileged helper: %s'
                    % exc)
    started = time.monotonic()
    error = _call_driver(ctx, driver, acc, job,
                         overlap=lambda: _precreate(ctx, job))
    ctx.device_changed(job)
    if error:
        return fail(ctx, job, error)
    return ctx.journal.step(job, PROGRAMMED, detail=json.dumps(
        {'seconds': round(time.monotonic() - started, 6)}))


def _precreate(ctx: Context, job: Job) -> None:
    """What the swap needs, while the load runs.

    The new function's trait is created and the provider's traits
    are read, so the swap after the load is one write.
    """
    prefix = _FUNCTION_TRAITS.get(job.kind)
    try:
        if prefix:
            ctx.placement.create_traits([names.custom(
                prefix, names.hex_id(job.function_id))])
        read = ctx.placement.traits(job.provider)
    except ProgrammingError as exc:
        LOG.debug('Preparing the trait swap of %s later: %s', job.id, exc)
        return
    if read is not None:
        ctx.seen.setdefault(job.id, {})['traits'] = read


def _call_driver(ctx: Context, driver, acc, job: Job,
                 overlap: Callable[[], None] | None = None) -> str | None:
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
    deadline = time.monotonic() + ctx.timeout
    if overlap is not None:
        overlap()
    thread.join(max(0.0, deadline - time.monotonic()))
    if thread.is_alive():
        return 'the load did not finish within %s s' % ctx.timeout
    if box[0] is not None:
        exc = box[0]
        return 'the load failed: %s' % (exc if isinstance(
            exc, base.DriverError) else '%s: %s' % (
                type(exc).__name__, exc))
    return None


def interrupted_load(ctx: Context, job: Job) -> Job:
    """A load whose process died: done, to retry, or failed."""
    loaded = ctx.loaded(ctx.device(job, fresh=True), job)
    if loaded == job.function_id:
        return ctx.journal.step(job, PROGRAMMED,
                                detail='found loaded after a restart')
    if job.attempts < MAX_ATTEMPTS:
        # Still fenced; the check runs again before the next load.
        return ctx.journal.step(job, FENCED,
                                detail='load interrupted (%s loaded);'
                                ' trying again' % loaded)
    return fail(ctx, job, 'the load was interrupted %d times; %s is '
                'loaded' % (job.attempts, loaded))


def verify(ctx: Context, job: Job) -> Job:
    """Sysfs shows the new function in the region, or the job fails."""
    loaded = ctx.loaded(ctx.device(job, fresh=True), job)
    if loaded != job.function_id:
        return fail(ctx, job, 'verification failed: region %s shows '
                    'function %s, not %s' % (
                        job.region, loaded, job.function_id))
    return ctx.journal.step(job, VERIFIED)
