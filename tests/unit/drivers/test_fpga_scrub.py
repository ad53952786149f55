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
"""The FPGA families' scrub: the operator's default bitstream.

The ``fpga-host`` tree, its cards found by the real FPGA drivers and
recorded in a real store, scrubbed by the real scrubber. The privileged
load is privsep.fpga's own code on the tree, running the stand-in
``fpgaconf``/``xbmgmt`` (tests/unit/programming/tools), which load into
the tree as the kernel shows a load.
"""

import dataclasses
import os
import subprocess

import pytest

from cyborg_drivers import base
from cyborg_drivers import device as device_model
from cyborg_drivers.fpga import regions as fpga_regions
from cyborg_drivers.fpga import scrub as fpga_scrub
from cyborg_nova import scrub
from cyborg_nova import store as state_store
from privsep import fpga as privsep_fpga
from tests import scrubhost
from tests.unit.programming import fakes


class FpgaTreeOps(scrubhost.TreeOps):
    """Resets, and bitstream loads by privsep.fpga's code, on the tree."""

    def __init__(self, root, library):
        super().__init__(root)
        self.library = library
        self.loads = []

    def load_bitstream(self, address, bitstream):
        self.loads.append((address, bitstream))
        return privsep_fpga._program(self.root, address, bitstream,
                                     bitstream_dir=self.library,
                                     timeout=60, run=subprocess.run)


@pytest.fixture
def tools(tmp_path, monkeypatch):
    directory = fakes.install_tools(str(tmp_path / 'bin'))
    monkeypatch.setenv('PATH', directory + os.pathsep + os.environ['PATH'])
    return directory


def fpga_host(tmp_path, monkeypatch, address, driver, bitstream):
    host = scrubhost.Host(
        str(tmp_path), profile='fpga-host',
        drivers=('intel_fpga', 'xilinx_fpga'), address=address,
        options={'cyborg_%s' % driver: {'scrub_bitstream': bitstream}})
    monkeypatch.setenv('FAKE_FPGA_SYSFS', host.root)
    ops = FpgaTreeOps(host.root, fakes.library(str(tmp_path / 'lib')))
    return host, ops


def loaded(host, address):
    """The function ids the card's regions show now."""
    card = fpga_regions.find_card(host.root, address)
    return [r.function_id for r in card.regions]


def test_a_whole_pac_gets_the_default_bitstream(tmp_path, monkeypatch,
                                                tools):
    host, ops = fpga_host(tmp_path, monkeypatch, fakes.PAC0, 'intel_fpga',
                          'intel/dma.gbs')
    assert loaded(host, fakes.PAC0) == [fakes.hexid(fakes.NLB0)]
    (unit,) = host.give_and_free('tenant-a', 1)
    assert unit == fakes.PAC0
    (outcome,) = host.scrubber(ops).run()
    assert outcome.result == scrub.FREE, outcome.reason
    assert outcome.done == (
        'flr: reset %s (flr)' % unit,
        'bitstream: loaded intel/dma.gbs into %s (function %s)'
        % (fakes.PAC0, fakes.hexid(fakes.DMA_AFU)))
    # The reset first, then the load; the card shows the operator's logic.
    assert ops.resets == [unit]
    assert ops.loads == [(fakes.PAC0, 'intel/dma.gbs')]
    assert loaded(host, fakes.PAC0) == [fakes.hexid(fakes.DMA_AFU)]
    assert host.store.units.holds() == []


def test_a_whole_alveo_gets_the_default_xclbin(tmp_path, monkeypatch,
                                               tools):
    host, ops = fpga_host(tmp_path, monkeypatch, fakes.ALVEO, 'xilinx_fpga',
                          'u250.xclbin')
    (unit,) = host.give_and_free('tenant-a', 1)
    # The guest had the user function; the management one is loaded.
    assert unit == '0000:d8:00.1'
    (outcome,) = host.scrubber(ops).run()
    assert outcome.result == scrub.FREE, outcome.reason
    assert ops.loads == [(fakes.ALVEO, 'u250.xclbin')]
    assert loaded(host, fakes.ALVEO) == [fakes.hexid(fakes.XCLBIN_UUID)]


def test_no_default_bitstream_leaves_the_logic_and_says_so(
        tmp_path, monkeypatch, tools):
    host, ops = fpga_host(tmp_path, monkeypatch, fakes.PAC0, 'intel_fpga',
                          '')
    host.give_and_free('tenant-a', 1)
    (outcome,) = host.scrubber(ops).run()
    assert outcome.result == scrub.FREE
    assert outcome.done[1] == (
        'bitstream: nothing loaded: no scrub_bitstream is set for this '
        'driver, so the logic the guest left stays loaded')
    assert ops.loads == []
    assert loaded(host, fakes.PAC0) == [fakes.hexid(fakes.NLB0)]


@pytest.mark.parametrize('bitstream, reason', [
    ('intel/other-fim.gbs', 'the bitstream was built for interface '
     + fakes.hexid(fakes.OTHER_INTERFACE)),
    ('intel/missing.gbs', 'missing.gbs'),
])
def test_a_default_bitstream_that_cannot_be_loaded_fences_the_card(
        tmp_path, monkeypatch, tools, bitstream, reason):
    host, ops = fpga_host(tmp_path, monkeypatch, fakes.PAC0, 'intel_fpga',
                          bitstream)
    (unit,) = host.give_and_free('tenant-a', 1)
    (outcome,) = host.scrubber(ops).run()
    assert outcome.result == scrub.FAILED
    assert 'step bitstream: ' in outcome.reason
    assert reason in outcome.reason
    # Still held, the card fenced: the tenant's logic is never handed on.
    (hold,) = host.store.units.holds()
    assert (hold.unit, hold.state) == (unit, 'failed')
    assert host.store.devices(scrubhost.NODE)[
        fakes.PAC0].state == state_store.FAILED
    assert host.fenced == [(fakes.PAC0, 'failed')]
    assert loaded(host, fakes.PAC0) == [fakes.hexid(fakes.NLB0)]
    # The unit is the card: one command gives both back.
    assert outcome.reason.endswith(
        'Fix it, then "cyborg-nova device-set-state %s ready"' % unit)


def test_a_vf_unit_is_left_to_its_reset(tmp_path, monkeypatch):
    class NoLoads:
        def load_bitstream(self, address, bitstream):
            raise AssertionError('loaded %s into %s' % (bitstream, address))
    host, _ = fpga_host(tmp_path, monkeypatch, fakes.PAC0, 'intel_fpga',
                        'intel/dma.gbs')
    whole = host.dc.accelerator
    vf = '0000:5e:00.1'
    # The PAC with its VF enabled: the port, and the unit, is the VF.
    with_vf = dataclasses.replace(
        whole, units=(vf,), sriov=device_model.SriovInfo(
            total_vfs=1, num_vfs=1, vf_addresses=(vf,)))
    assert fpga_scrub.load_default('intel/dma.gbs', with_vf, vf,
                                   NoLoads()) == (
        'nothing loaded: 0000:5e:00.1 is one of the units of 0000:5e:00.0,'
        ' whose logic no guest can load')
    # The same card given whole is loaded.
    with pytest.raises(AssertionError, match='loaded intel/dma.gbs'):
        fpga_scrub.load_default('intel/dma.gbs', whole, fakes.PAC0,
                                NoLoads())


def test_an_alveo_without_its_management_function_is_refused(
        tmp_path, monkeypatch):
    host, ops = fpga_host(tmp_path, monkeypatch, fakes.ALVEO, 'xilinx_fpga',
                          'u250.xclbin')
    hidden = dataclasses.replace(host.dc.accelerator,
                                 functions=('0000:d8:00.1',))
    with pytest.raises(base.DriverError, match='the management function '
                       '0000:d8:00.0 of the card is not visible'):
        fpga_scrub.load_default('u250.xclbin', hidden, '0000:d8:00.1', ops)
    assert ops.loads == []
