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

"""HostInventory: an event re-discovers only the device it concerns."""

import os
import shutil

from oslo_config import cfg

from cyborg_drivers import discovery
from cyborg_drivers import events
from cyborg_drivers import inventory
from cyborg_drivers import loader


def make(root, names=('intel_qat', 'nvidia_gpu', 'xilinx_fpga')):
    conf = cfg.ConfigOpts()
    conf([])
    inv = inventory.HostInventory(discovery.Discoverer(
        loader.load(conf, list(names)), root))
    inv.refresh()
    return inv


def event(action, address):
    return events.PciEvent(action, address, None, None, None)


def bus(root, address):
    return os.path.join(root, 'bus', 'pci', 'devices', address)


def test_vf_removed_changes_its_pf(host_tree):
    root = host_tree('crypto-nic-host')
    inv = make(root)
    vf = inv.accelerators()[0].units[3]
    # The kernel unlinks the bus entry before it announces the removal.
    os.unlink(bus(root, vf))
    change = inv.handle_event(event('remove', vf))
    assert [a.address for a in change.changed] == ['0000:6b:00.0']
    assert not change.added and not change.removed
    qat = change.changed[0]
    assert qat.total == 15 and vf not in qat.units


def test_pf_removed_and_back(host_tree):
    root = host_tree('gpu-host')
    inv = make(root)
    assert len(inv.accelerators()) == 8
    hidden = os.path.join(os.path.dirname(root), 'hidden-link')
    os.rename(bus(root, '0000:af:00.0'), hidden)
    change = inv.handle_event(event('remove', '0000:af:00.0'))
    assert [a.address for a in change.removed] == ['0000:af:00.0']
    assert len(inv.accelerators()) == 7
    os.rename(hidden, bus(root, '0000:af:00.0'))
    change = inv.handle_event(event('add', '0000:af:00.0'))
    assert [a.address for a in change.added] == ['0000:af:00.0']
    assert len(inv.accelerators()) == 8


def test_remove_event_wins_over_lingering_sysfs(host_tree):
    root = host_tree('gpu-host')
    inv = make(root)
    change = inv.handle_event(event('remove', '0000:3c:00.0'))
    assert [a.address for a in change.removed] == ['0000:3c:00.0']


def test_event_for_unrelated_function_changes_nothing(host_tree):
    root = host_tree('gpu-host')
    inv = make(root)
    before = inv.accelerators()
    change = inv.handle_event(event('change', '0000:00:17.0'))  # SATA
    assert not change
    assert inv.accelerators() == before


def test_second_function_of_a_card(host_tree):
    root = host_tree('fpga-host')
    inv = make(root)
    alveo = [a for a in inv.accelerators() if a.driver == 'xilinx_fpga'][0]
    assert alveo.address == '0000:d8:00.0'
    assert alveo.functions == ('0000:d8:00.0', '0000:d8:00.1')
    # The user function goes away: the card keeps its address (its
    # management function's), with nothing left to hand to a guest.
    shutil.move(bus(root, '0000:d8:00.1'),
                os.path.join(os.path.dirname(root), 'user-fn'))
    change = inv.handle_event(event('remove', '0000:d8:00.1'))
    assert not change.added and not change.removed
    (card,) = change.changed
    assert card.address == '0000:d8:00.0'
    assert (card.total, card.units, card.setup_required) == (0, (), True)
    assert 'no user function visible' in card.problems[0]
    # And back: the same card, usable again.
    shutil.move(os.path.join(os.path.dirname(root), 'user-fn'),
                bus(root, '0000:d8:00.1'))
    change = inv.handle_event(event('add', '0000:d8:00.1'))
    assert [a.address for a in change.changed] == ['0000:d8:00.0']
    assert change.changed[0] == alveo
