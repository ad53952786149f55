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

"""Options of the ``[cyborg_scrub]`` group: units cleaned between tenants.

Read by nova-compute (which scrubs) and by the commands that show or
clear held units (``device-list``, ``device-set-state``).
"""

from __future__ import annotations

from oslo_config import cfg

from cyborg_nova.conf import groups

GROUP = cfg.OptGroup(
    'cyborg_scrub',
    title='Scrubbing freed accelerator units',
    help='What happens to a unit (a VF, a whole device) between one '
         'guest and the next: held back and reserved in Placement until '
         'its family\'s scrub ran, or until the operator marks it ready.')

OPTS = [
    cfg.BoolOpt(
        'enabled',
        default=True,
        help="""
Hold every freed accelerator unit back until it is scrubbed.

When a guest gives a unit up (delete, resize confirm or revert, a move
rolled back, a unit freed by reconciliation), the unit is held in the
same transaction that frees it, counted as reserved in Placement, and
nova-compute runs its family's scrub steps (see ``steps``) before any
other guest can get it. A step that fails or takes longer than
``step_timeout`` fences the device (state ``failed``). Default: True.
False hands freed units to the next guest as they were left.

Related options:

* ``steps``, ``step_timeout``, ``one_time_use``
"""),
    cfg.DictOpt(
        'steps',
        default={},
        help="""
The scrub steps per driver, ``driver:step+step``, e.g.
``intel_qat:flr,nvidia_gpu:``.

Each family offers its steps (the admin guide's "Scrubbing" page lists
them and what each does): ``flr``, the kernel's function reset of a unit
that is a PCI function, is every family's. A driver not named runs all
of its family's steps, in the family's order; an empty list runs none
(the unit is free again at once, unless one-time-use). A step the
family does not have fails the scrub (the device is fenced). Default:
empty (every family's steps).

Related options:

* ``enabled``, ``step_timeout``
"""),
    cfg.IntOpt(
        'step_timeout',
        default=120,
        min=1,
        help="""
Seconds one scrub step may take. A step still running then fails the
scrub: the unit stays held, its device is fenced (state ``failed``),
and the reason names the step. Default: 120.

A step that erases storage takes as long as the drive does: an NVMe
drive's user data erase of a large namespace (the generic driver's
``nvme_format``) or an FPGA's bitstream load can need more. The
privileged work of a step that timed out may still be running: check it
finished before marking the unit ready.

Related options:

* ``steps``
"""),
    cfg.ListOpt(
        'one_time_use',
        default=[],
        help="""
Devices whose freed units wait for the operator: driver names (every
device of the driver) or PCI addresses of devices.

A freed unit of such a device is scrubbed (as ``steps`` says), then
stays held, reserved in Placement, until ``cyborg-nova device-set-state
<unit> ready``; its provider carries the trait ``HW_PCI_ONE_TIME_USE``,
as Nova's one-time-use PCI devices do. Holds per unit: the other units of
the device stay in service. Default: empty.

Related options:

* ``enabled``
"""),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    groups.register(conf, GROUP, OPTS)


def list_opts() -> dict:
    return {GROUP: OPTS}
