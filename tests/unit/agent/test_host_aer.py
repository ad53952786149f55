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

"""The agent's LocalHost and PCIe AER: discoveries, recovery events."""

import pytest

from cyborg_drivers import events
from cyborg_nova.agent import host as agent_host
from cyborg_nova import health
from cyborg_nova import store as state_store
from tests import aer_sysfs
from tests.unit.agent.test_host import drivers
from tests.unit.agent.test_host import NODE
from tests.unit.agent.test_host import RecordingFencer

ALVEO = '0000:d8:00.0'
USER_FN = '0000:d8:00.1'
PORT = '0000:d7:00.0'
PAC = '0000:5e:00.0'


class Device:
    """A pyudev-like device as a monitor hands it over."""

    def __init__(self, sys_name, properties):
        self.sys_name = sys_name
        self.properties = properties
        self.subsystem = 'pci'


@pytest.fixture
def setup(host_tree, tmp_path):
    root = host_tree('fpga-host')
    for address in (ALVEO, USER_FN, PAC):
        aer_sysfs.write(root, address)
    store = state_store.StateStore(str(tmp_path / 'state.sqlite'))
    fencer = RecordingFencer()

    def local(aer=True):
        return agent_host.LocalHost(
            drivers(), root, store, NODE, fencer, auto_ready=True,
            aer=health.AerHealth(store, health.Policy()) if aer else None)
    return local, fencer, store, root


@pytest.fixture
def primed(setup):
    """(local, fencer, store, root), discovered once, the fencer emptied."""
    make, fencer, store, root = setup
    local = make()
    local.refresh()
    fencer.take()
    return local, fencer, store, root


def recovery(address, error_event):
    return events.event_from_device('change', Device(address, {
        'PCI_ID': '10EE:5020', 'ERROR_EVENT': error_event,
        'DEVICE_ONLINE': '0', 'SEQNUM': '41'}))


def test_the_kernel_recovery_properties_make_the_event():
    event = recovery(USER_FN, 'FAILED_RECOVERY')
    assert event == events.PciEvent('change', USER_FN, '10ee', '5020', 41,
                                    'FAILED_RECOVERY')
    assert 'FAILED_RECOVERY' in events.ERROR_EVENTS
    plain = events.event_from_device('change', Device(USER_FN, {}))
    assert plain.error_event is None


def test_a_fatal_error_seen_by_discovery_is_fenced(primed):
    local, fencer, store, root = primed
    aer_sysfs.write(root, USER_FN, fatal=1)
    local.refresh()
    assert fencer.take() == [(ALVEO, state_store.UNHEALTHY, True)]
    entry = {e['pci']['address']: e for e in local.hardware()}[ALVEO]
    assert [(c['address'], c['fatal']) for c in entry['aer']] == [
        (ALVEO, 0), (USER_FN, 1)]
    assert entry['aer_effect']['effect'] == 'fence'
    assert entry['aer_effect']['reason'].startswith(
        'PCIe AER: 1 fatal error(s) on 0000:d8:00.1')
    assert entry['health']['healthy'] is False
    # The PAC has counters and no errors: no effect.
    assert {e['pci']['address']: e for e in local.hardware()}[PAC][
        'aer_effect'] is None


def test_a_fatal_error_of_the_port_above_fences_the_device(primed):
    local, fencer, store, root = primed
    # The link's errors: counted by the root port the Alveo hangs off.
    aer_sysfs.write(root, PORT)
    local.refresh()
    # Counters without errors: the device stays in service.
    assert fencer.take() == [(ALVEO, state_store.READY, True)]
    aer_sysfs.write(root, PORT, fatal=1)
    local.refresh()
    assert fencer.take() == [(ALVEO, state_store.UNHEALTHY, True)]
    assert store.devices(NODE)[ALVEO].reason.startswith(
        'PCIe AER: 1 fatal error(s) on 0000:d7:00.0 (the PCIe port above '
        'the device) since ')


def test_a_failed_recovery_event_fences_the_functions_device(primed):
    local, fencer, store, root = primed
    aer_sysfs.write(root, USER_FN, fatal=1)
    local.handle_event(recovery(USER_FN, 'FAILED_RECOVERY'))
    # The event is about the Alveo's user function: the Alveo is fenced.
    assert fencer.take() == [(ALVEO, state_store.UNHEALTHY, True)]
    assert store.devices(NODE)[ALVEO].state == state_store.UNHEALTHY


@pytest.mark.parametrize('counters', ['unchanged', 'none'])
def test_a_failed_recovery_fences_whatever_the_counts_say(primed, counters):
    local, fencer, store, root = primed
    if counters == 'none':
        # A function without AER: the kernel still recovers, and fails.
        aer_sysfs.remove(root, USER_FN)
    local.handle_event(recovery(USER_FN, 'FAILED_RECOVERY'))
    assert fencer.take() == [(ALVEO, state_store.UNHEALTHY, True)]
    row = store.devices(NODE)[ALVEO]
    assert row.state == state_store.UNHEALTHY
    assert row.reason == (
        "the kernel's PCIe error recovery of 0000:d8:00.1 failed (uevent "
        "ERROR_EVENT=FAILED_RECOVERY): unusable until it is reset or "
        "replaced")
    # Sticky: a discovery that finds nothing wrong keeps it fenced.
    local.refresh()
    assert store.devices(NODE)[ALVEO].state == state_store.UNHEALTHY
    # Until the operator clears it, as device-set-state ready does.
    health.acknowledge(store, NODE, ALVEO, root)
    store.set_state(NODE, ALVEO, state_store.READY, None)
    local.refresh()
    assert store.devices(NODE)[ALVEO].state == state_store.READY
    assert store.aer.effects(NODE) == {}


def test_a_failed_recovery_takes_no_effect_with_aer_disabled(setup):
    make, fencer, store, root = setup
    local = agent_host.LocalHost(
        drivers(), root, store, NODE, fencer, auto_ready=True,
        aer=health.AerHealth(store, health.Policy(enabled=False)))
    local.refresh()
    fencer.take()
    local.handle_event(recovery(USER_FN, 'FAILED_RECOVERY'))
    assert store.devices(NODE)[ALVEO].state == state_store.READY
    assert store.aer.effects(NODE) == {}


def test_a_recovery_event_checks_the_device_even_if_nothing_changed(primed):
    local, fencer, store, root = primed
    # A plain change event with nothing new: nothing to fence.
    assert local.handle_event(events.event_from_device(
        'change', Device(USER_FN, {}))) == []
    # The kernel's recovery event: the device is checked all the same.
    local.handle_event(recovery(USER_FN, 'SUCCESSFUL_RECOVERY'))
    assert fencer.take() == [(ALVEO, state_store.READY, True)]


def test_without_aer_health_nothing_is_evaluated(setup):
    make, fencer, store, root = setup
    local = make(aer=False)
    aer_sysfs.write(root, USER_FN, fatal=1)
    local.refresh()
    assert store.devices(NODE)[ALVEO].state == state_store.READY
    assert store.aer.counters(NODE) == {}
