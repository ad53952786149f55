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

"""What the FPGA families write as root, and their scrub step.

A guest given a whole card (an Intel PAC's PF without VFs, an Alveo's
user function) can load its own logic into the card: through the PF's
FME, or through XRT's mailbox to the management function. The reset
every family runs (``flr``) leaves that logic loaded, so the next
tenant would get it. The ``bitstream`` step loads the operator's
default bitstream (``scrub_bitstream``) instead.

Units that are VFs are left to ``flr``: the card's logic is loaded only
through its PF, which no guest holds while VFs are enabled (the kernel
refuses to program a card whose port is on a VF).
"""

from __future__ import annotations

from oslo_config import cfg

from cyborg_drivers import base
from cyborg_drivers import bitstreams
from cyborg_drivers import device as device_model

#: The scrub step that loads the operator's default bitstream.
SCRUB_BITSTREAM = 'bitstream'

OPTS = [
    cfg.StrOpt(
        'scrub_bitstream',
        default='',
        help="""
Bitstream loaded into a card a guest had whole, when the guest frees it,
before anyone else can get it: the name of a file in the privsep
daemon's ``[cyborg_nova_privsep] bitstream_dir`` (a GBS for Intel, an
xclbin for Xilinx), checked against the card's region as a programming
request is. Empty (the default): the logic the guest left stays loaded,
and the scrub step ``bitstream`` only logs that. A load that fails fences
the card, with the reason, until the operator marks it ready. A name the
daemon would refuse (absolute; with ``..``, ``.`` or empty segments; odd
characters) is an error of ``cyborg-nova config-check``.

Related options:

* ``[cyborg_scrub] steps`` (this is the step ``bitstream``)
* ``[cyborg_scrub] enabled``
* ``[cyborg_scrub] step_timeout`` must cover the load (the privsep
  daemon's ``fpga_program_timeout`` bounds the tool itself): a load still
  running at the step's timeout fails the step and fences the card.
"""),
]


def privileged_program(address: str, bitstream: str) -> str | None:
    """:func:`privsep.fpga.program`, its refusals as DriverError."""
    # Imported here: loading a driver starts no privsep daemon.
    import privsep
    import privsep.fpga
    try:
        return privsep.fpga.program(address, bitstream)
    except (privsep.InvalidArgument, privsep.NotPossible) as exc:
        raise base.DriverError(str(exc))


class FpgaOps:
    """The FPGA families' privileged writes, through privsep.

    Tests put an object with the same methods in its place.
    """

    def load_bitstream(self, address: str, bitstream: str) -> str | None:
        """Load ``bitstream`` into the card at ``address``."""
        return privileged_program(address, bitstream)


class DefaultBitstreamScrub:
    """The ``bitstream`` scrub step, for an FPGA driver to inherit.

    Put before :class:`~cyborg_drivers.base.AcceleratorDriver` in the
    bases; the driver adds :data:`OPTS` to its ``CONFIG_OPTS``.
    """

    #: The function reset first, then the card's logic.
    SCRUB_STEPS = (base.SCRUB_FLR, SCRUB_BITSTREAM)

    @classmethod
    def unit_ops(cls) -> FpgaOps:
        """The bitstream load (:mod:`privsep.fpga`)."""
        return FpgaOps()

    def check_options(self) -> list[base.ConfigProblem]:
        """``scrub_bitstream`` must be a name the privsep daemon takes.

        Caught here, at start and by ``config-check``, rather than at the
        first scrub, which would fence the card.
        """
        problems = list(super().check_options())
        name = self.options.scrub_bitstream
        if name:
            try:
                bitstreams.check_name(name)
            except bitstreams.BadName as exc:
                problems.append(base.ConfigProblem(
                    'scrub_bitstream', '%s: every scrub of a whole card '
                    'would fail and fence it' % exc))
        return problems

    def scrub(self, sysfs_root: str, accelerator: device_model.Accelerator,
              unit: str, step: str, ops: object | None = None) -> str:
        """Scrub step ``bitstream``, or ``flr`` as every family."""
        if step != SCRUB_BITSTREAM:
            return super().scrub(sysfs_root, accelerator, unit, step, ops)
        return load_default(self.options.scrub_bitstream, accelerator,
                            unit, ops or FpgaOps())


def load_default(bitstream: str, accelerator: device_model.Accelerator,
                 unit: str, ops: FpgaOps) -> str:
    """Load ``bitstream`` into ``accelerator`` that gave up ``unit``.

    :returns: what was done, for the log.
    :raises base.DriverError: the load was refused or failed.
    """
    if not bitstream:
        return ('nothing loaded: no scrub_bitstream is set for this '
                'driver, so the logic the guest left stays loaded')
    vfs = accelerator.sriov.num_vfs if accelerator.sriov else 0
    if vfs or tuple(accelerator.units) != (unit,):
        return ('nothing loaded: %s is one of the units of %s, whose '
                'logic no guest can load' % (unit, accelerator.address))
    if accelerator.functions and (
            accelerator.address not in accelerator.functions):
        # An Alveo whose management function is hidden (passed through,
        # or not bound): nothing on this host can load it.
        raise base.DriverError(
            'the management function %s of the card is not visible: it '
            'cannot be programmed' % accelerator.address)
    function = ops.load_bitstream(accelerator.address, bitstream)
    return 'loaded %s into %s (function %s)' % (
        bitstream, accelerator.address, function or 'not shown')
