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

"""find_card: the privileged helper's view of an FPGA card is the drivers'.

The helper (:mod:`privsep.fpga`) checks a bitstream against the card it
reads itself, without loading the drivers that call it; for every
function of every host below, what it reads must be what the FPGA
drivers report at that address.
"""

import os

from oslo_config import cfg
import pytest

from cyborg_drivers import discovery
from cyborg_drivers.fake import hosttree
from cyborg_drivers.fpga import regions as fpga_regions
from cyborg_drivers import loader
from tests.unit.programming import fakes


def _pac_with_vf():
    profile = fakes.pac_profile(1)
    profile['devices'][0]['sriov'].update(numvfs=1,
                                          vf_driver='intel-fpga-pci')
    return profile


def _alveo_user_only():
    profile = fakes.pac_profile(0, alveo=True)
    profile['devices'] = profile['devices'][1:]
    return profile


def _alveo_user_at_zero():
    profile = _alveo_user_only()
    profile['devices'][0]['address'] = '0000:d8:00.0'
    return profile


def _two_mgmt_functions():
    profile = fakes.pac_profile(0, alveo=True)
    second = dict(profile['devices'][0], address='0000:d8:00.2',
                  driver='vfio-pci')
    profile['devices'].append(second)
    return profile


HOSTS = {
    'fpga-host': lambda: 'fpga-host',
    'mixed-host': lambda: 'mixed-host',
    'pacs-and-alveo': lambda: fakes.pac_profile(2, alveo=True),
    'dfl': lambda: fakes.pac_profile(2, layout='dfl'),
    'pac-port-on-vf': _pac_with_vf,
    'alveo-user-only': _alveo_user_only,
    'alveo-user-at-function-0': _alveo_user_at_zero,
    'alveo-two-mgmt-functions': _two_mgmt_functions,
}


@pytest.mark.parametrize('host', sorted(HOSTS))
def test_find_card_agrees_with_the_drivers(tmp_path, host):
    root = str(tmp_path / 'sys')
    hosttree.build_tree(HOSTS[host](), root)
    conf = cfg.ConfigOpts()
    conf([])
    drivers = loader.load(conf, ['intel_fpga', 'xilinx_fpga'])
    families = {'intel_fpga': fpga_regions.INTEL,
                'xilinx_fpga': fpga_regions.XILINX}
    devices = os.path.join(root, 'bus', 'pci', 'devices')
    cards = 0
    for address in sorted(os.listdir(devices)):
        slot = address.rpartition('.')[0]
        only = sorted({n for n in os.listdir(devices)
                       if n.rpartition('.')[0] == slot} | {address})
        found = discovery.Discoverer(drivers, root).discover(
            only=only).by_address().get(address)
        card = fpga_regions.find_card(root, address)
        if found is None:
            assert card is None, address
            continue
        cards += 1
        assert card == fpga_regions.FpgaCard(
            address, families[found.driver], found.fpga_regions,
            found.sriov.num_vfs if found.sriov else 0), address
    # (The user-only Alveo is keyed by its absent function 0.)
    assert cards or host == 'alveo-user-only'


def test_not_an_fpga(tmp_path):
    root = str(tmp_path / 'sys')
    hosttree.build_tree('gpu-host', root)
    devices = os.path.join(root, 'bus', 'pci', 'devices')
    assert all(fpga_regions.find_card(root, a) is None
               for a in os.listdir(devices))
    assert fpga_regions.find_card(str(tmp_path / 'nothing'),
                                  '0000:3b:00.0') is None
