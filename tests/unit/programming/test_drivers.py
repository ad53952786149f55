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

"""The drivers' program(): the fake loads into its tree, real ones call
the privileged helper with the card's address and the bitstream's name."""

import os

import pytest

from cyborg_drivers import base
from cyborg_drivers import discovery
from cyborg_drivers.fake import driver as fake
from cyborg_drivers.fake import hosttree
from cyborg_drivers import loader
import privsep
import privsep.fpga
from tests.unit.programming import fakes


def make_conf(tmp_path, profile='fpga-host'):
    conf = fakes.config(str(tmp_path / 'nova.conf'), {
        'cyborg_nova': {
            'state_path': tmp_path / 'state.sqlite',
            'bitstream_dir': fakes.library(str(tmp_path / 'bitstreams'))},
        'cyborg_fake': {'host_profile': profile,
                        'tree_path': tmp_path / 'tree'},
    })
    return conf, loader.load(conf, ['fake'])[0]


def found(driver):
    # The host's own bus is empty: the fake reports its tree's devices.
    root = os.path.join(os.path.dirname(driver.conf.cyborg_nova.state_path),
                        'host-sys')
    os.makedirs(os.path.join(root, 'bus', 'pci', 'devices'), exist_ok=True)
    return discovery.Discoverer([driver], root).discover().by_address()


def test_fake_fpga_host_programs_into_its_tree(tmp_path):
    conf, driver = make_conf(tmp_path)
    before = found(driver)
    pac = before[fakes.PAC0]
    (region,) = pac.fpga_regions
    driver.program(pac, region.name, 'intel/nlb3.gbs')
    after = found(driver)
    assert after[fakes.PAC0].fpga_regions[0].function_id == fakes.hexid(
        fakes.NLB3)
    assert 'CUSTOM_FPGA_FUNCTION_ID_INTEL_%s' % fakes.hexid(
        fakes.NLB3).upper() in after[fakes.PAC0].traits
    # Nothing else moved.
    assert after[fakes.PAC1] == before[fakes.PAC1]
    alveo = after[fakes.ALVEO]
    driver.program(alveo, '0', 'u250.xclbin')
    assert found(driver)[fakes.ALVEO].fpga_regions[0].function_id == (
        fakes.hexid(fakes.XCLBIN_UUID))
    # The tree keeps it: a new driver instance (a restart) sees it.
    assert found(loader.load(conf, ['fake'])[0])[fakes.PAC0].fpga_regions[
        0].function_id == fakes.hexid(fakes.NLB3)


def test_fake_dfl_programs_the_port(tmp_path):
    profile = tmp_path / 'dfl.yaml'
    import yaml
    profile.write_text(yaml.safe_dump(fakes.pac_profile(1, layout='dfl')))
    conf, driver = make_conf(tmp_path, str(profile))
    pac = found(driver)['0000:20:00.0']
    assert pac.fpga_regions[0].layout == 'dfl'
    driver.program(pac, pac.fpga_regions[0].name, 'intel/dma.gbs')
    assert found(driver)['0000:20:00.0'].fpga_regions[0].function_id == (
        fakes.hexid(fakes.DMA_AFU))


@pytest.mark.parametrize('address, region, name, words', [
    (fakes.PAC0, 'intel-fpga-dev.9', 'intel/nlb3.gbs', 'no FPGA region'),
    (fakes.PAC0, None, 'intel/other-fim.gbs', 'built for interface'),
    (fakes.PAC0, None, 'u250.xclbin', 'takes a gbs'),
    (fakes.PAC0, None, 'escape.gbs', 'outside'),
    (fakes.PAC0, None, 'garbage.gbs', 'magic'),
    (fakes.ALVEO, None, 'intel/nlb3.gbs', 'takes a xclbin'),
])
def test_fake_refuses_like_the_card(tmp_path, address, region, name,
                                    words):
    conf, driver = make_conf(tmp_path)
    acc = found(driver)[address]
    with pytest.raises(base.DriverError, match=words):
        driver.program(acc, region or acc.fpga_regions[0].name, name)
    assert found(driver)[address] == acc


def test_write_function_needs_a_port(tmp_path):
    profile = fakes.pac_profile(1)
    profile['devices'][0]['sriov'].update(numvfs=1,
                                          vf_driver='intel-fpga-pci')
    root = str(tmp_path / 'sys')
    hosttree.build_tree(profile, root)
    from cyborg_drivers import device
    region = device.FpgaRegion('intel-fpga-dev.0', None, None, 'opae')
    with pytest.raises(FileNotFoundError, match='SR-IOV'):
        fake.write_function(root, '0000:20:00.0', region, 'ab' * 16)


@pytest.fixture
def privileged(monkeypatch):
    calls = []

    def program(address, bitstream):
        calls.append((address, bitstream))
        if bitstream == 'refused.gbs':
            raise privsep.InvalidArgument('refused by the daemon')
        if bitstream == 'broken.gbs':
            raise privsep.NotPossible('fpgaconf exited with status 1')
        return 'ab' * 16
    monkeypatch.setattr(privsep.fpga, 'program', program)
    return calls


def real_drivers(tmp_path, profile='fpga-host'):
    conf = fakes.config(str(tmp_path / 'nova.conf'), {})
    root = str(tmp_path / 'sys')
    hosttree.build_tree(profile, root)
    drivers = loader.load(conf, ['intel_fpga', 'xilinx_fpga'])
    return drivers, discovery.Discoverer(drivers, root).discover(
    ).by_address()


def test_intel_and_xilinx_go_through_privsep(tmp_path, privileged):
    (intel, xilinx), devices = real_drivers(tmp_path)
    intel.program(devices[fakes.PAC0], 'intel-fpga-dev.0', 'a.gbs')
    xilinx.program(devices[fakes.ALVEO], '0', 'b.xclbin')
    assert privileged == [(fakes.PAC0, 'a.gbs'), (fakes.ALVEO, 'b.xclbin')]
    with pytest.raises(base.DriverError, match='refused by the daemon'):
        intel.program(devices[fakes.PAC0], 'intel-fpga-dev.0',
                      'refused.gbs')
    with pytest.raises(base.DriverError, match='status 1'):
        xilinx.program(devices[fakes.ALVEO], '0', 'broken.gbs')
    with pytest.raises(base.DriverError, match='no FPGA region'):
        intel.program(devices[fakes.PAC0], 'intel-fpga-dev.7', 'a.gbs')


def test_intel_refuses_with_the_port_on_a_vf(tmp_path, privileged):
    profile = fakes.pac_profile(1)
    profile['devices'][0]['sriov'].update(numvfs=1,
                                          vf_driver='intel-fpga-pci')
    (intel, _), devices = real_drivers(tmp_path, profile)
    acc = devices['0000:20:00.0']
    with pytest.raises(base.DriverError, match='assigned to its VF'):
        intel.program(acc, acc.fpga_regions[0].name, 'a.gbs')
    assert privileged == []


def test_xilinx_without_its_management_function(tmp_path, privileged):
    profile = fakes.pac_profile(0, alveo=True)
    profile['devices'] = profile['devices'][1:]   # only the user function
    (_, xilinx), devices = real_drivers(tmp_path, profile)
    acc = devices[fakes.ALVEO]
    with pytest.raises(base.DriverError, match='not visible'):
        xilinx.program(acc, '0', 'b.xclbin')
    assert privileged == [] and os.path.exists(str(tmp_path))
