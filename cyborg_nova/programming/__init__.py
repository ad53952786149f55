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

"""Safe FPGA reprogramming: validate, fence, prove unallocated, program.

:class:`Programmer` reprograms one FPGA (or several, concurrently) on
this host, as a journal of steps in the host's state store:

1. validate (nothing is touched yet): the device is an FPGA region a
   loaded driver can program; the bitstream is a file under
   ``[cyborg_nova] bitstream_dir`` whose header (GBS or xclbin2) names
   the region's interface id;
2. fence: the device's state becomes ``programming`` in the store (so
   Nova's update computes ``reserved = total`` too), then ``reserved``
   is written to its provider, generation-checked (the agent's Fencer);
3. prove unallocated: the provider has no allocations; otherwise it is
   unfenced and the job refused, naming the consumers (instances);
4. program through the driver (and its privsep helper), with a timeout;
5. verify: a fresh discovery reads the loaded function back from sysfs;
6. swap the function trait on the provider (generation-checked, the
   values Nova's update computes; trait definitions are never deleted;
   the allocations are read again if the provider changed since step 3)
   and record the owned traits in the store as Nova's update does;
7. unfence: the device gets its state back, and its provider the
   ``reserved`` that state gives.

A failure from step 4 on leaves the device fenced in the ``failed`` state
with :data:`FAILED_TRAIT` on its provider; a failure before it rolls back
(the job is ``refused``). Every step is journaled before it acts and is
idempotent, so a job whose process died (its lock file is free) is
resumed by :meth:`Programmer.recover`, forward: fencing and proving
the provider unallocated again before any load. A device is never
unfenced before its traits match what sysfs says is loaded.

The package: :mod:`.journal` (jobs, steps, the job locks),
:mod:`.placement` (the reads and the trait writes), :mod:`.validation`
(step 1), :mod:`.steps` (the actions of steps 2 to 7, failing and
rolling back, and which one follows each journaled step) and
:mod:`.programmer` (jobs submitted, run and recovered). Everything public
is importable from here.
"""

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
from cyborg_nova.programming.journal import STATUSES
from cyborg_nova.programming.journal import STEPS
from cyborg_nova.programming.journal import SUCCEEDED
from cyborg_nova.programming.journal import TRAITS_SWAPPED
from cyborg_nova.programming.journal import UNFENCING
from cyborg_nova.programming.journal import VERIFIED
from cyborg_nova.programming.placement import PlacementOps
from cyborg_nova.programming.programmer import Programmer
from cyborg_nova.programming.steps.failure import FAILED_TRAIT
from cyborg_nova.programming.steps.load import MAX_ATTEMPTS
from cyborg_nova.programming.validation import Plan

__all__ = [
    'CHECKED',
    'CREATED',
    'DONE',
    'FAILED',
    'FAILED_STEP',
    'FAILED_TRAIT',
    'FAILING',
    'FENCED',
    'FENCING',
    'Job',
    'JobLock',
    'Journal',
    'MAX_ATTEMPTS',
    'PlacementOps',
    'Plan',
    'PROGRAMMED',
    'Programmer',
    'PROGRAMMING',
    'ProgrammingError',
    'REFUSED',
    'Refused',
    'ROLLED_BACK',
    'ROLLING_BACK',
    'RUNNING',
    'STATUSES',
    'STEPS',
    'SUCCEEDED',
    'TRAITS_SWAPPED',
    'UNFENCING',
    'VERIFIED',
]
