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

"""Hosts with FPGAs, bitstream libraries and fake programming tools.

Shared by the unit and functional tests of FPGA programming and by
``benchmarks/reprogram.py``.
"""

from __future__ import annotations

import os
import stat
import sys

from cyborg_drivers import bitstreams

PAC_INTERFACE = '9346116d-a52d-5ca8-b06a-a9a389ef7c8d'
NLB0 = 'd8424dc4-a4a3-c413-f89e-433683f9040b'
NLB3 = 'f7df405c-bd7a-cf72-22f1-44b0b93acd18'
OTHER_INTERFACE = '11111111-2222-3333-4444-555555555555'
DMA_AFU = '0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9'
U250_SHELL = 'aae4ec49-c710-567b-99f9-ffb11858d4a8'
U250_LOGIC = '59a84337-ba62-594d-b87e-c2c80ca409f8'
XCLBIN_UUID = '3f2a8e7c-1b4d-4c6e-9a0f-5d7e8c9b0a1f'

#: fpga-host's devices.
PAC0 = '0000:5e:00.0'    # NLB mode 0 loaded
PAC1 = '0000:af:00.0'    # NLB mode 3 loaded
ALVEO = '0000:d8:00.0'   # management function

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, 'tools')


def config(path: str, sections: dict):
    """A ConfigOpts with ``[cyborg_nova]``, read from a file of ``sections``.

    The file is written at ``path``. Values come from a file, never
    ``set_override``: the groups of :mod:`cyborg_nova.conf` are
    module-level OptGroup objects, which oslo.config copies shallowly,
    so an override on one ConfigOpts would show in every later one of
    the process.
    """
    from oslo_config import cfg

    from cyborg_nova import conf as cn_conf
    with open(path, 'w') as f:
        for section, options in sections.items():
            f.write('[%s]\n' % section)
            for key, value in options.items():
                f.write('%s = %s\n' % (key, value))
    conf = cfg.ConfigOpts()
    cn_conf.register_opts(conf)
    conf(['--config-file', path])
    return conf


def hexid(value: str) -> str:
    return value.replace('-', '').lower()


def pac_profile(count: int = 2, layout: str = 'opae', alveo: bool = False,
                name: str = 'pac-host') -> dict:
    """A host with ``count`` PACs (NLB0 loaded) and maybe an Alveo."""
    devices = []
    for n in range(count):
        bus = 0x20 + 2 * n
        devices.append({
            'address': '0000:%02x:00.0' % bus, 'vendor': 0x8086,
            'device': 0x09c4, 'class': 0x120000, 'revision': 1,
            'numa_node': n % 2, 'driver': 'intel-fpga-pci'
            if layout == 'opae' else 'dfl-pci',
            'sriov': {'totalvfs': 1, 'numvfs': 0, 'vf_device': 0x09c5},
            'fpga': {'layout': layout, 'interface_id': PAC_INTERFACE,
                     'afu_id': NLB0}})
    if alveo:
        for function, device, driver in ((0, 0x5004, 'xclmgmt'),
                                         (1, 0x5005, 'xocl')):
            entry = {'address': '0000:d8:00.%d' % function,
                     'vendor': 0x10ee, 'device': device,
                     'class': 0x120000, 'subsystem_device': 0x000e,
                     'numa_node': 1, 'driver': driver}
            if function == 0:
                entry['xilinx'] = {'interface_uuids': [U250_SHELL],
                                   'logic_uuids': [U250_LOGIC]}
            devices.append(entry)
    return {'name': name, 'description': 'FPGAs for programming tests',
            'devices': devices}


def library(directory: str) -> str:
    """A bitstream directory with one of each kind (and bad ones)."""
    os.makedirs(os.path.join(directory, 'intel'), exist_ok=True)
    files = {
        'intel/nlb3.gbs': bitstreams.make_gbs(PAC_INTERFACE, NLB3,
                                              b'\xa5' * 4096),
        'intel/nlb0.gbs': bitstreams.make_gbs(PAC_INTERFACE, NLB0,
                                              b'\x5a' * 4096),
        'intel/dma.gbs': bitstreams.make_gbs(PAC_INTERFACE, DMA_AFU,
                                             b'\x3c' * 4096),
        'intel/other-fim.gbs': bitstreams.make_gbs(OTHER_INTERFACE, NLB3),
        'u250.xclbin': bitstreams.make_xclbin(U250_SHELL, XCLBIN_UUID,
                                              b'\0' * 1024),
        # Built for another shell than the U250's.
        'other-shell.xclbin': bitstreams.make_xclbin(
            OTHER_INTERFACE, XCLBIN_UUID, b'\0' * 1024),
        'garbage.gbs': b'\x7fELF' + b'\0' * 64,
    }
    for name, data in files.items():
        with open(os.path.join(directory, name), 'wb') as f:
            f.write(data)
    outside = os.path.join(os.path.dirname(os.path.abspath(directory)),
                           'outside.gbs')
    with open(outside, 'wb') as f:
        f.write(files['intel/nlb3.gbs'])
    link = os.path.join(directory, 'escape.gbs')
    if not os.path.lexists(link):
        os.symlink(outside, link)
    return directory


def install_tools(directory: str) -> str:
    """``fpgaconf`` and ``xbmgmt`` stand-ins in ``directory``; it.

    They load into the tree named by ``$FAKE_FPGA_SYSFS`` (see
    tools/fake_fpga_tool.py) and run with this interpreter.
    """
    os.makedirs(directory, exist_ok=True)
    for name in ('fpgaconf', 'xbmgmt'):
        path = os.path.join(directory, name)
        with open(path, 'w') as f:
            f.write('#!/bin/sh\nexec %s %s %s "$@"\n' % (
                sys.executable, os.path.join(TOOLS, 'fake_fpga_tool.py'),
                name))
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP
                 | stat.S_IXOTH)
    return directory
