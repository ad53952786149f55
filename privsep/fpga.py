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

"""Privileged FPGA programming: load a bitstream into a card's region.

The one entrypoint takes a PCI address and a bitstream's *name*, never a
path: the daemon resolves the name under its own ``[cyborg_nova_privsep]
bitstream_dir`` (refusing anything that leads out of it), reads the
file's header and checks it against the card it finds at the address in
its own sysfs tree (an Intel PAC's PR interface id, an Alveo's shell
interface uuid) before it runs the vendor's tool:

- Intel PAC (OPAE ``intel-fpga-pci`` or the kernel's DFL):
  ``fpgaconf --bus B --device D --function F [--segment S] FILE``;
- AMD/Xilinx Alveo (management function):
  ``xbmgmt program --device BDF --shell FILE --force``.

The tool is looked up on the daemon's ``PATH`` and killed after
``fpga_program_timeout`` seconds. The caller verifies what was loaded
from sysfs itself; the function id the daemon reads back is returned for
its log.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess

from cyborg_drivers import bitstreams
from cyborg_drivers.fpga import regions as fpga_regions
import privsep
from privsep import _common

LOG = logging.getLogger(__name__)

#: Output of a failed tool kept in the error (its end says why).
_OUTPUT_TAIL = 600


@privsep.sysfs_admin.entrypoint
def program(address: str, bitstream: str) -> str | None:
    """Load bitstream ``bitstream`` into the FPGA at ``address``.

    :param address: the card's PCI address (an Intel PAC's PF, an
        Alveo's management function).
    :param bitstream: the bitstream's name under the daemon's
        ``bitstream_dir``.
    :returns: the function id (32 hex digits) sysfs shows afterwards, or
        None if it shows none.
    :raises InvalidArgument: (or a subclass) a bad or unknown address, a
        device that is not a programmable FPGA, a bad or unknown
        bitstream name, a file that is not a bitstream or does not fit
        the card's region; nothing was run.
    :raises NotPossible: the tool is not installed, failed or timed out.
    """
    conf = _common.privileged_conf()
    return _program(_common.sysfs_root(), address, bitstream,
                    bitstream_dir=conf.bitstream_dir,
                    timeout=conf.fpga_program_timeout)


def _program(sysfs_root: str, address: str, bitstream: str, *,
             bitstream_dir: str, timeout: float,
             run=subprocess.run) -> str | None:
    _common.device_dir(sysfs_root, address)
    try:
        path, header = bitstreams.load(bitstream_dir, bitstream)
    except bitstreams.BadName as exc:
        raise privsep.PathLikeArgument(str(exc))
    except bitstreams.NotFound as exc:
        raise privsep.InvalidArgument(str(exc))
    except bitstreams.InvalidBitstream as exc:
        raise privsep.InvalidArgument('bitstream %s: %s' % (bitstream, exc))
    card, region = _target(sysfs_root, address, header)
    argv = _command(card, region, path)
    tool = shutil.which(argv[0])
    if tool is None:
        raise privsep.NotPossible(
            '%s is not installed (not on the PATH of the privsep daemon); '
            'it is needed to program %s' % (argv[0], address))
    argv[0] = tool
    LOG.info('Programming %s region %s with %s (function %s): %s', address,
             region.name, bitstream, header.function_id, ' '.join(argv))
    try:
        proc = run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                   stderr=subprocess.STDOUT, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise privsep.NotPossible('%s did not finish within %s s; it was '
                                  'killed' % (os.path.basename(tool),
                                              timeout))
    except OSError as exc:
        raise privsep.NotPossible('cannot run %s: %s' % (tool, exc))
    if proc.returncode != 0:
        output = (proc.stdout or b'').decode('utf-8', 'replace').strip()
        raise privsep.NotPossible(
            '%s exited with status %s: %s' % (
                os.path.basename(tool), proc.returncode,
                output[-_OUTPUT_TAIL:] or 'no output'))
    after = _card(sysfs_root, address)
    for found in (after.regions if after else ()):
        if found.name == region.name:
            return found.function_id
    return None


def _card(sysfs_root: str, address: str):
    """The card at ``address`` as the FPGA drivers read it, or None."""
    return fpga_regions.find_card(sysfs_root, address)


def _target(sysfs_root: str, address: str, header: bitstreams.Bitstream):
    """The card and the region ``header`` fits, checked in sysfs."""
    card = _card(sysfs_root, address)
    if card is None:
        raise privsep.InvalidArgument(
            '%s is not an FPGA card this host can program (an Intel PAC '
            'or an Alveo management function)' % address)
    wanted = (bitstreams.XCLBIN if card.family == fpga_regions.XILINX
              else bitstreams.GBS)
    if header.kind != wanted:
        raise privsep.InvalidArgument(
            'a %s cannot be loaded into %s (%s): it takes a %s'
            % (header.kind, address, fpga_regions.FAMILY_NAMES[card.family],
               wanted))
    regions = [r for r in card.regions
               if r.interface_id == header.interface_id]
    if not regions:
        raise privsep.InvalidArgument(
            'the bitstream was built for interface %s; %s offers %s'
            % (header.interface_id, address,
               ', '.join(r.interface_id or 'no readable interface id'
                         for r in card.regions) or 'no region'))
    region = regions[0]
    if region.layout in ('opae', 'dfl') and card.num_vfs:
        raise privsep.NotPossible(
            'the port of %s is assigned to its VF (%d VFs enabled); '
            'disable SR-IOV before programming' % (address,
                                                   card.num_vfs))
    return card, region


def _command(card, region, path: str) -> list[str]:
    if region.layout == 'xrt':
        return ['xbmgmt', 'program', '--device', card.address, '--shell',
                path, '--force']
    domain, bus, rest = card.address.split(':')
    device, function = rest.split('.')
    argv = ['fpgaconf', '--bus', '0x' + bus, '--device', '0x' + device,
            '--function', '0x' + function]
    if int(domain, 16):
        argv += ['--segment', '0x' + domain]
    return argv + [path]
