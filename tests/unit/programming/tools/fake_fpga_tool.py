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

"""Stand-in for OPAE's ``fpgaconf`` and XRT's ``xbmgmt program``.

``fake_fpga_tool.py fpgaconf --bus 0x5e --device 0x00 --function 0x0
[--segment S] FILE`` or ``fake_fpga_tool.py xbmgmt program --device BDF
--shell FILE --force``: checks the file's header against the card in the
fake sysfs tree at ``$FAKE_FPGA_SYSFS`` (as the real tools check the
interface id) and writes the new function id where the card shows it.

``$FAKE_FPGA_DELAY`` seconds are slept before the write (a slow load);
``$FAKE_FPGA_FAIL`` makes it fail (exit 1) without loading anything;
``$FAKE_FPGA_LIE`` makes it report success (exit 0) without loading
anything; ``$FAKE_FPGA_LOG`` is a file each call is appended to, and
``$FAKE_FPGA_TIMES`` one each load appends ``ADDRESS START END`` to (wall
clock seconds).
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.dirname(HERE)))))

from cyborg_drivers import bitstreams  # noqa: E402
from cyborg_drivers import discovery  # noqa: E402
from cyborg_drivers.fake import driver as fake  # noqa: E402
from cyborg_drivers.fpga import intel as intel_fpga  # noqa: E402
from cyborg_drivers.fpga import xilinx as xilinx_fpga  # noqa: E402


def main(argv):
    tool, argv = argv[0], argv[1:]
    parser = argparse.ArgumentParser(prog=tool)
    if tool == 'xbmgmt':
        parser.add_argument('command', choices=['program'])
        parser.add_argument('--device', required=True)
        parser.add_argument('--shell', required=True)
        parser.add_argument('--force', action='store_true')
    else:
        parser.add_argument('--bus', required=True)
        parser.add_argument('--device', required=True)
        parser.add_argument('--function', required=True)
        parser.add_argument('--segment', default='0x0')
        parser.add_argument('file')
    args = parser.parse_args(argv)
    root = os.environ['FAKE_FPGA_SYSFS']
    if os.environ.get('FAKE_FPGA_LOG'):
        with open(os.environ['FAKE_FPGA_LOG'], 'a') as f:
            f.write('%s %s\n' % (tool, ' '.join(argv)))
    if tool == 'xbmgmt':
        address, path = args.device, args.shell
    else:
        address = '%04x:%02x:%02x.%x' % (
            int(args.segment, 16), int(args.bus, 16),
            int(args.device, 16), int(args.function, 16))
        path = args.file
    header = bitstreams.read(path)
    found = discovery.Discoverer(
        [intel_fpga.IntelFpgaDriver(None),
         xilinx_fpga.XilinxFpgaDriver(None)], root).discover()
    card = found.by_address().get(address)
    if card is None:
        print('no FPGA at %s' % address)
        return 2
    regions = [r for r in card.fpga_regions
               if r.interface_id == header.interface_id]
    if not regions:
        print('incompatible: interface %s' % header.interface_id)
        return 3
    start = time.time()
    time.sleep(float(os.environ.get('FAKE_FPGA_DELAY') or 0))
    if os.environ.get('FAKE_FPGA_FAIL'):
        print('PR failed: %s' % os.environ['FAKE_FPGA_FAIL'])
        return 1
    if not os.environ.get('FAKE_FPGA_LIE'):
        fake.write_function(root, address, regions[0], header.function_id)
    if os.environ.get('FAKE_FPGA_TIMES'):
        with open(os.environ['FAKE_FPGA_TIMES'], 'a') as f:
            f.write('%s %f %f\n' % (address, start, time.time()))
    print('programmed %s' % address)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
