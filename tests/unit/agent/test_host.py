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

"""LocalHost: which devices are fenced, and with what, on a fake host."""

import os

from oslo_config import cfg
import pytest

from cyborg_drivers import base as driver_base
from cyborg_drivers import device as device_model
from cyborg_drivers import events
from cyborg_drivers import loader
from cyborg_nova.agent import host as agent_host
from cyborg_nova import fencing
from cyborg_nova import store as state_store

NODE = 'node-1'
PAC = '0000:5e:00.0'


class RecordingFencer(fencing.Fencer):
    """Records what would be written instead of calling Placement."""

    def __init__(self):
        super().__init__(client=None)
        self.calls = []
        self.fail = set()

    def apply(self, address, uuid, state, accelerator):
        self.calls.append((address, state, accelerator is not None))
        assert uuid == device_model.device_uuid(NODE, address)
        outcome = fencing.FAILED if address in self.fail else fencing.UNCHANGED
        return fencing.FenceResult(address, uuid, outcome)

    def take(self):
        calls, self.calls = self.calls, []
        return calls


def drivers(names=('intel_fpga', 'xilinx_fpga')):
    conf = cfg.ConfigOpts()
    conf([])
    return loader.load(conf, list(names))


@pytest.fixture
def setup(host_tree, tmp_path):
    root = host_tree('fpga-host')
    store = state_store.StateStore(str(tmp_path / 'state.sqlite'))
    fencer = RecordingFencer()
    local = agent_host.LocalHost(drivers(), root, store, NODE, fencer,
                                 auto_ready=True)
    return local, fencer, store, root


def test_first_refresh_checks_every_device_then_only_changes(setup):
    local, fencer, store, root = setup
    local.prime()
    assert fencer.take() == []
    local.refresh()
    found = [a.address for a in local.accelerators()]
    assert [c[0] for c in fencer.take()] == found
    local.refresh()
    assert fencer.take() == []


def test_a_vanished_device_is_fenced_as_gone(setup):
    local, fencer, store, root = setup
    local.refresh()
    fencer.take()
    os.unlink(os.path.join(root, 'bus', 'pci', 'devices', PAC))
    local.refresh()
    assert fencer.take() == [(PAC, state_store.READY, False)]
    # The row stays: the provider is Nova's to remove.
    assert PAC in store.devices(NODE)


def test_a_device_gone_at_start_is_fenced_at_the_first_refresh(setup):
    local, fencer, store, root = setup
    local.refresh()
    os.unlink(os.path.join(root, 'bus', 'pci', 'devices', PAC))
    restarted = agent_host.LocalHost(drivers(), root, store, NODE, fencer,
                                     auto_ready=True)
    fencer.take()
    restarted.refresh()
    assert (PAC, state_store.READY, False) in fencer.take()


def test_a_failing_driver_is_not_a_vanished_device(setup):
    local, fencer, store, root = setup
    local.refresh()
    fencer.take()

    class Broken(driver_base.AcceleratorDriver):
        name = 'broken'

        def discover(self, snapshot):
            raise driver_base.DriverError('cannot read the card')
    local.set_drivers([Broken(cfg.ConfigOpts())])
    local.refresh()
    # Nova's update leaves such providers alone; so does the agent.
    assert fencer.take() == []


def test_a_state_change_in_the_store_is_fenced(setup):
    local, fencer, store, root = setup
    local.refresh()
    fencer.take()
    store.set_state(NODE, PAC, state_store.HELD, 'operator')
    local.refresh()
    assert fencer.take() == [(PAC, state_store.HELD, True)]


def test_a_failed_fence_is_retried_at_the_next_refresh(setup):
    local, fencer, store, root = setup
    fencer.fail.add(PAC)
    local.refresh()
    fencer.take()
    local.refresh()
    assert fencer.take() == [(PAC, state_store.READY, True)]
    fencer.fail.clear()
    local.refresh()
    assert fencer.take() == [(PAC, state_store.READY, True)]
    local.refresh()
    assert fencer.take() == []


def test_an_event_fences_only_its_device(setup):
    local, fencer, store, root = setup
    local.refresh()
    fencer.take()
    results = local.handle_event(events.PciEvent('remove', PAC, '8086',
                                                 '09c4', 7))
    assert [r.address for r in results] == [PAC]
    assert fencer.take() == [(PAC, state_store.READY, False)]
    assert PAC not in [a.address for a in local.accelerators()]
    # An event that changes nothing writes nothing.
    assert local.handle_event(events.PciEvent(
        'change', '0000:00:17.0', '8086', 'a182', 8)) == []


def test_hardware_carries_state_and_health(setup):
    local, fencer, store, root = setup
    local.refresh()
    store.set_state(NODE, PAC, state_store.UNHEALTHY, 'ECC errors')
    entries = {e['pci']['address']: e for e in local.hardware()}
    assert entries[PAC]['state'] == state_store.UNHEALTHY
    assert entries[PAC]['health'] == {
        'healthy': False, 'problems': ['state unhealthy: ECC errors']}
    others = [e for a, e in entries.items() if a != PAC]
    assert all(e['health']['healthy'] for e in others)
    assert all(e['state'] == state_store.READY for e in others)


def test_without_a_fencer_nothing_is_fenced(host_tree, tmp_path):
    store = state_store.StateStore(str(tmp_path / 'state.sqlite'))
    local = agent_host.LocalHost(drivers(), host_tree('fpga-host'), store,
                                 NODE, None)
    assert local.refresh() == []
    # New devices start inactive without auto_ready, as in nova-compute.
    assert {r.state for r in store.devices(NODE).values()} == {
        state_store.INACTIVE}
