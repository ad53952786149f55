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

"""privsep.fpga: everything checked before the tool runs, then the tool."""

import os
import subprocess
import sys

import pytest

from cyborg_drivers.fake import hosttree
import privsep
from privsep import fpga
from tests.unit.programming import fakes


@pytest.fixture
def host(tmp_path):
    root = str(tmp_path / 'sys')
    hosttree.build_tree('fpga-host', root)
    lib = fakes.library(str(tmp_path / 'bitstreams'))
    return root, lib


class Runner:
    """subprocess.run's stand-in: records argv, loads like the tool."""

    def __init__(self, root, returncode=0, output=b'', timeout=False):
        self.root, self.calls = root, []
        self.returncode, self.output, self.timeout = (returncode, output,
                                                      timeout)

    def __call__(self, argv, **kwargs):
        self.calls.append((argv, kwargs))
        if self.timeout:
            raise subprocess.TimeoutExpired(argv, kwargs['timeout'])
        if self.returncode == 0:
            env = dict(os.environ, FAKE_FPGA_SYSFS=self.root)
            return subprocess.run(
                [sys.executable,
                 os.path.join(fakes.TOOLS, 'fake_fpga_tool.py'),
                 os.path.basename(argv[0])] + argv[1:],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        return subprocess.CompletedProcess(argv, self.returncode,
                                           self.output)


@pytest.fixture
def tools(tmp_path, monkeypatch):
    """fpgaconf and xbmgmt on PATH (only their lookup matters here)."""
    directory = fakes.install_tools(str(tmp_path / 'bin'))
    monkeypatch.setenv('PATH', directory + os.pathsep + os.environ['PATH'])
    return directory


def program(host, address, name, run, timeout=60):
    root, lib = host
    return fpga._program(root, address, name, bitstream_dir=lib,
                         timeout=timeout, run=run)


def test_intel_pac_is_loaded_with_fpgaconf(host, tools):
    run = Runner(host[0])
    loaded = program(host, fakes.PAC0, 'intel/nlb3.gbs', run)
    assert loaded == fakes.hexid(fakes.NLB3)
    ((argv, kwargs),) = run.calls
    assert argv == [os.path.join(tools, 'fpgaconf'), '--bus', '0x5e',
                    '--device', '0x00', '--function', '0x0',
                    os.path.join(os.path.realpath(host[1]), 'intel',
                                 'nlb3.gbs')]
    assert kwargs['timeout'] == 60 and kwargs['check'] is False


def test_alveo_is_loaded_with_xbmgmt(host, tools):
    run = Runner(host[0])
    loaded = program(host, fakes.ALVEO, 'u250.xclbin', run)
    assert loaded == fakes.hexid(fakes.XCLBIN_UUID)
    argv = run.calls[0][0]
    assert argv[1:5] == ['program', '--device', fakes.ALVEO, '--shell']
    assert argv[-1] == '--force'


@pytest.mark.parametrize('address, name, error, words', [
    ('../../etc', 'intel/nlb3.gbs', privsep.PathLikeArgument, 'path'),
    ('0000:5E:00.0', 'intel/nlb3.gbs', privsep.NotAPciAddress, 'PCI'),
    ('0000:ff:00.0', 'intel/nlb3.gbs', privsep.NoSuchDevice, 'no PCI'),
    (fakes.PAC0, '/etc/shadow', privsep.PathLikeArgument, 'absolute'),
    (fakes.PAC0, '../outside.gbs', privsep.PathLikeArgument, '".."'),
    (fakes.PAC0, 'escape.gbs', privsep.PathLikeArgument, 'outside'),
    (fakes.PAC0, 'missing.gbs', privsep.InvalidArgument, 'no bitstream'),
    (fakes.PAC0, 'garbage.gbs', privsep.InvalidArgument, 'magic'),
    (fakes.PAC0, 'intel/other-fim.gbs', privsep.InvalidArgument,
     'built for interface 111111112222'),
    (fakes.PAC0, 'u250.xclbin', privsep.InvalidArgument, 'takes a gbs'),
    (fakes.ALVEO, 'intel/nlb3.gbs', privsep.InvalidArgument,
     'takes a xclbin'),
    ('0000:18:00.0', 'intel/nlb3.gbs', privsep.InvalidArgument,
     'not an FPGA card'),
])
def test_refused_before_anything_runs(host, tools, address, name, error,
                                      words):
    run = Runner(host[0])
    before = open(os.path.join(host[0], 'bus', 'pci', 'devices', fakes.PAC0,
                               'fpga', 'intel-fpga-dev.0',
                               'intel-fpga-port.0', 'afu_id')).read()
    with pytest.raises(error, match=words):
        program(host, address, name, run)
    assert run.calls == []
    assert open(os.path.join(host[0], 'bus', 'pci', 'devices', fakes.PAC0,
                             'fpga', 'intel-fpga-dev.0', 'intel-fpga-port.0',
                             'afu_id')).read() == before


def test_the_port_on_a_vf_is_refused(tmp_path, tools):
    profile = fakes.pac_profile(1)
    profile['devices'][0]['sriov'].update(numvfs=1,
                                          vf_driver='intel-fpga-pci')
    root = str(tmp_path / 'sys')
    hosttree.build_tree(profile, root)
    lib = fakes.library(str(tmp_path / 'bitstreams'))
    run = Runner(root)
    with pytest.raises(privsep.NotPossible, match='assigned to its VF'):
        program((root, lib), '0000:20:00.0', 'intel/nlb3.gbs', run)
    assert run.calls == []


def test_dfl_layout_and_segment(tmp_path, tools):
    profile = fakes.pac_profile(1, layout='dfl')
    profile['devices'][0]['address'] = '0001:20:00.0'
    root = str(tmp_path / 'sys')
    hosttree.build_tree(profile, root)
    lib = fakes.library(str(tmp_path / 'bitstreams'))
    run = Runner(root)
    loaded = program((root, lib), '0001:20:00.0', 'intel/nlb3.gbs', run)
    assert loaded == fakes.hexid(fakes.NLB3)
    assert run.calls[0][0][-3:-1] == ['--segment', '0x0001']


def test_tool_missing_failing_or_hanging(host, tmp_path, monkeypatch):
    monkeypatch.setenv('PATH', str(tmp_path / 'empty'))
    with pytest.raises(privsep.NotPossible, match='fpgaconf is not '
                       'installed'):
        program(host, fakes.PAC0, 'intel/nlb3.gbs', Runner(host[0]))
    fakes.install_tools(str(tmp_path / 'bin'))
    monkeypatch.setenv('PATH', str(tmp_path / 'bin'))
    with pytest.raises(privsep.NotPossible, match='exited with status 3: '
                       'noise\nError: PR failed'):
        program(host, fakes.PAC0, 'intel/nlb3.gbs', Runner(
            host[0], returncode=3, output=b'noise\nError: PR failed\n'))
    with pytest.raises(privsep.NotPossible, match='did not finish within '
                       '5 s; it was killed'):
        program(host, fakes.PAC0, 'intel/nlb3.gbs',
                Runner(host[0], timeout=True), timeout=5)


def test_the_real_subprocess_path(host, tools, monkeypatch):
    """subprocess.run itself, the stand-in tool and its sysfs write."""
    monkeypatch.setenv('FAKE_FPGA_SYSFS', host[0])
    assert program(host, fakes.PAC1, 'intel/dma.gbs', subprocess.run) == (
        fakes.hexid(fakes.DMA_AFU))
    monkeypatch.setenv('FAKE_FPGA_DELAY', '5')
    with pytest.raises(privsep.NotPossible, match='did not finish'):
        program(host, fakes.PAC1, 'intel/nlb3.gbs', subprocess.run,
                timeout=0.5)
