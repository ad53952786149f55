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

"""The Alveo driver: one card per slot, keyed by its management function."""

from oslo_config import cfg
import pytest

from cyborg_drivers import discovery
from cyborg_drivers import loader

IFACE = 'aae4ec49-c710-567b-99f9-ffb11858d4a8'


def mgmt(device=0x5004, driver='xclmgmt', slot='0000:d8:00', **extra):
    return dict({'address': slot + '.0', 'vendor': 0x10ee, 'device': device,
                 'class': 0x120000, 'subsystem_device': 0x000e,
                 'numa_node': 1, 'driver': driver,
                 'xilinx': {'interface_uuids': [IFACE]}}, **extra)


def user(device=0x5005, driver='xocl', slot='0000:d8:00', **extra):
    return dict({'address': slot + '.1', 'vendor': 0x10ee, 'device': device,
                 'class': 0x120000, 'subsystem_device': 0x000e,
                 'numa_node': 1, 'driver': driver}, **extra)


def discover(host_tree, *devices):
    conf = cfg.ConfigOpts()
    conf([])
    root = host_tree({'name': 'alveo', 'devices': list(devices)})
    return discovery.Discoverer(loader.load(conf, ['xilinx_fpga']),
                                root).discover()


def test_card_is_keyed_by_its_management_function(host_tree):
    (card,) = discover(host_tree, mgmt(), user()).accelerators
    assert card.address == '0000:d8:00.0'
    assert card.product_id == '5004' and card.kernel_driver == 'xclmgmt'
    assert card.functions == ('0000:d8:00.0', '0000:d8:00.1')
    assert (card.total, card.units) == (1, ('0000:d8:00.1',))
    assert not card.setup_required and card.problems == ()
    assert card.traits == (
        'CUSTOM_FPGA_PRODUCT_ID_5005',
        'CUSTOM_FPGA_REGION_XILINX_AAE4EC49C710567B99F9FFB11858D4A8',
        'CUSTOM_FPGA_XILINX')


def test_management_function_alone_is_never_a_unit(host_tree):
    (card,) = discover(host_tree, mgmt()).accelerators
    # Same provider as with both functions visible ...
    assert card.address == '0000:d8:00.0'
    # ... but nothing to hand to a guest: the management function is not.
    assert (card.total, card.units) == (0, ())
    assert card.setup_required
    assert card.problems == (
        'no user function visible, only the management function '
        '0000:d8:00.0, which is never handed to a guest; is the user '
        'function (xocl) hidden or removed?',)
    # Traits do not change with the user function's visibility.
    assert 'CUSTOM_FPGA_PRODUCT_ID_5005' in card.traits


def test_user_function_alone_keeps_the_cards_address(host_tree):
    (card,) = discover(host_tree, user()).accelerators
    assert card.address == '0000:d8:00.0'
    assert card.product_id == '5004'
    assert (card.total, card.units) == (1, ('0000:d8:00.1',))
    assert card.problems == ('management function 0000:d8:00.0 is not '
                             'visible: the card cannot be managed or '
                             'programmed',)
    assert 'CUSTOM_FPGA_PRODUCT_ID_5005' in card.traits


def test_user_function_assigned_to_a_guest_is_still_the_unit(host_tree):
    # Bound to vfio-pci, the user function is known by its device id.
    (card,) = discover(host_tree, mgmt(),
                       user(driver='vfio-pci')).accelerators
    assert card.units == ('0000:d8:00.1',) and card.problems == ()


@pytest.mark.parametrize('mgmt_id', [0x5000, 0x5004, 0x500c, 0x5020,
                                     0x505c], ids=hex)
def test_known_alveo_ids_unbound(host_tree, mgmt_id):
    (card,) = discover(host_tree, mgmt(mgmt_id, driver=None),
                       user(mgmt_id + 1, driver=None)).accelerators
    assert card.address == '0000:d8:00.0'
    assert card.units == ('0000:d8:00.1',)
    assert 'CUSTOM_FPGA_PRODUCT_ID_%04X' % (mgmt_id + 1) in card.traits


def test_unknown_ids_claimed_only_when_bound_to_xrt(host_tree):
    result = discover(
        host_tree,
        # An Alveo this driver does not know, bound to XRT's drivers.
        mgmt(0x5098, slot='0000:3b:00'), user(0x5099, slot='0000:3b:00'),
        # XDMA example designs and other Xilinx devices with an
        # accelerator or memory class are not Alveo shells.
        {'address': '0000:5e:00.0', 'vendor': 0x10ee, 'device': 0x9038,
         'class': 0x058000, 'driver': 'xdma'},
        {'address': '0000:5f:00.0', 'vendor': 0x10ee, 'device': 0x7024,
         'class': 0x120000},
        {'address': '0000:60:00.0', 'vendor': 0x10ee, 'device': 0x5005,
         'class': 0x120000, 'driver': 'vfio-pci'})
    assert [(a.address, a.units) for a in result.accelerators] == [
        ('0000:3b:00.0', ('0000:3b:00.1',)),
        # A known user id alone is still an Alveo's user function.
        ('0000:60:00.0', ('0000:60:00.0',))]
    assert result.accelerators[1].problems == (
        'management function is not visible: the card cannot be managed '
        'or programmed',)
