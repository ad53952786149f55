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

"""PCIe AER rules: a fake tree's counters against a real state store.

Each test writes the kernel's counter files into a built host tree,
discovers it with the real drivers and evaluates with a real store, a
clock of its own and a real oslo.messaging notifier (its ``test``
driver keeps what is sent).
"""

import time

from oslo_config import cfg
import oslo_messaging
from oslo_messaging.notify import _impl_test
import pytest

from cyborg_drivers import discovery
from cyborg_drivers import loader
from cyborg_nova.conf import aer as aer_conf
from cyborg_nova import health
from cyborg_nova import notifications
from cyborg_nova import store as state_store
from cyborg_nova.store import health as health_table
from tests import aer_sysfs

NODE = 'cn1'
ALVEO = '0000:d8:00.0'
USER_FN = '0000:d8:00.1'
PAC = '0000:5e:00.0'
START = 1_700_000_000.0


def notifier():
    conf = cfg.ConfigOpts()
    conf([])
    oslo_messaging.get_notification_transport(conf)
    conf.set_override('driver', ['test'],
                      group='oslo_messaging_notifications')
    return notifications.Notifier(conf, 'cyborg-nova-agent.%s' % NODE)


def sent():
    return [(m['event_type'], priority, m['payload'][
        'cyborg_nova_object.data']['address'], m['payload'][
        'cyborg_nova_object.data']['reason'], m['payload'][
        'cyborg_nova_object.data']['state'])
        for _, m, priority, _ in _impl_test.NOTIFICATIONS]


class Host:
    """A fake FPGA host, its store and an evaluator with a clock."""

    def __init__(self, root, store_path, policy=None, notify=True):
        self.root = root
        conf = cfg.ConfigOpts()
        conf([])
        self.discoverer = discovery.Discoverer(
            loader.load(conf, ['intel_fpga', 'xilinx_fpga']), root)
        self.store = state_store.StateStore(store_path)
        self.now = START
        self.health = health.AerHealth(
            self.store, policy or health.Policy(),
            notifier() if notify else None, clock=lambda: self.now)

    def counters(self, address, **counts):
        aer_sysfs.write(self.root, address, **counts)

    def evaluate(self, after=60.0, health_=None):
        """One discovery ``after`` seconds later; {address: row}."""
        self.now += after
        found = self.discoverer.discover().accelerators
        rows = self.store.sync(NODE, found, state_store.READY)
        return (health_ or self.health).evaluate(NODE, found, rows)

    def effect(self, address=ALVEO):
        return self.store.aer.effects(NODE).get(address)


@pytest.fixture
def host(host_tree, tmp_path):
    _impl_test.reset()
    root = host_tree('fpga-host')
    made = []

    def build(policy=None, notify=True, counters=True):
        made.append(Host(root, str(tmp_path / 'state.sqlite'), policy,
                         notify))
        if counters:
            # Every function of the Alveo and the PAC has AER, no
            # errors yet.
            for address in (ALVEO, USER_FN, PAC):
                made[-1].counters(address)
        return made[-1]
    return build


def test_no_errors_take_no_effect(host):
    h = host()
    rows = h.evaluate()
    rows = h.evaluate()
    assert rows[ALVEO].state == state_store.READY
    assert h.store.aer.effects(NODE) == {}
    assert sent() == []


def test_a_fatal_error_fences_and_notifies_once(host):
    h = host()
    h.evaluate()
    h.counters(USER_FN, fatal=1)
    rows = h.evaluate()
    reason = ('PCIe AER: 1 fatal error(s) on 0000:d8:00.1 since the '
              'kernel began counting')
    assert (rows[ALVEO].state, rows[ALVEO].reason) == (
        state_store.UNHEALTHY, reason)
    assert (h.effect().effect, h.effect().reason) == ('fence', reason)
    assert health.traits(h.effect()) == {'CUSTOM_PCIE_AER_ERRORS'}
    # The other devices are untouched.
    assert rows[PAC].state == state_store.READY
    h.evaluate()
    assert sent() == [('accelerator.aer_error', 'WARN', ALVEO,
                       'fence: ' + reason, 'unhealthy')]


def test_fatal_errors_before_the_first_read_count(host):
    h = host()
    h.counters(USER_FN, fatal=2)
    rows = h.evaluate()
    assert rows[ALVEO].state == state_store.UNHEALTHY
    assert '2 fatal error(s)' in rows[ALVEO].reason


def test_non_fatal_errors_before_the_first_read_do_not(host):
    h = host()
    h.counters(USER_FN, nonfatal=3, correctable=500)
    h.evaluate()
    assert h.effect() is None
    # The first one after it informs (the default allows none an hour).
    h.counters(USER_FN, nonfatal=4, correctable=500)
    rows = h.evaluate()
    assert rows[ALVEO].state == state_store.READY
    assert (h.effect().effect, h.effect().reason) == (
        'inform', 'PCIe AER: 1 non-fatal error(s) on 0000:d8:00.1 in '
                  '1 min, more than 0 an hour')
    assert health.traits(h.effect()) == {'CUSTOM_PCIE_AER_ERRORS'}
    assert sent() == [('accelerator.aer_error', 'WARN', ALVEO,
                       'inform: ' + h.effect().reason, 'ready')]


def test_correctable_errors_within_the_rate_take_no_effect(host):
    h = host(health.Policy(correctable_per_hour=10))
    h.evaluate()
    h.counters(USER_FN, correctable=10)
    h.evaluate(after=1800)
    assert h.effect() is None
    # The window is an hour from the first read: 11 in it is too many.
    h.counters(USER_FN, correctable=11)
    h.evaluate(after=1000)
    assert h.effect().effect == 'inform'
    assert h.effect().reason == ('PCIe AER: 11 correctable error(s) on '
                                 '0000:d8:00.1 in 47 min, more than 10 '
                                 'an hour')


def test_a_new_window_starts_after_an_hour(host):
    h = host(health.Policy(correctable_per_hour=10))
    h.evaluate()
    h.counters(USER_FN, correctable=9)
    h.evaluate(after=3600)  # the window ends here: 9 is allowed
    h.counters(USER_FN, correctable=18)
    h.evaluate(after=1800)  # 9 more in the new window
    assert h.effect() is None
    h.counters(USER_FN, correctable=20)
    h.evaluate(after=600)  # 11 in the new one
    assert h.effect().effect == 'inform'


def test_a_window_read_late_allows_its_whole_length(host):
    h = host(health.Policy(correctable_per_hour=10))
    h.evaluate()
    h.counters(USER_FN, correctable=30)
    h.evaluate(after=3 * 3600)  # 10 an hour for 3 hours
    assert h.effect() is None
    h.counters(USER_FN, correctable=61)
    h.evaluate(after=3 * 3600)
    assert h.effect().effect == 'inform'


@pytest.mark.parametrize('effect,state,trait', [
    ('none', state_store.READY, False),
    ('inform', state_store.READY, True),
    ('fence', state_store.UNHEALTHY, True),
])
def test_the_configured_effect(host, effect, state, trait):
    h = host(health.Policy(nonfatal_effect=effect, correctable_effect=effect,
                           correctable_per_hour=0))
    h.evaluate()
    h.counters(PAC, correctable=1)
    rows = h.evaluate()
    assert rows[PAC].state == state
    assert (h.effect(PAC) is not None) == trait
    assert bool(health.traits(h.effect(PAC))) == trait
    assert len(sent()) == int(trait)


def test_an_effect_is_raised_never_lowered(host):
    h = host(health.Policy(correctable_effect='inform',
                           correctable_per_hour=0))
    h.evaluate()
    h.counters(USER_FN, correctable=1)
    h.evaluate()
    assert h.effect().effect == 'inform'
    h.counters(USER_FN, fatal=1, correctable=1)
    h.evaluate()
    assert h.effect().effect == 'fence'
    # More correctable errors (inform) do not weaken it.
    h.counters(USER_FN, fatal=1, correctable=5)
    rows = h.evaluate()
    assert h.effect().effect == 'fence'
    assert rows[ALVEO].state == state_store.UNHEALTHY
    assert [(e, s) for e, _, _, r, s in sent()] == [
        ('accelerator.aer_error', 'ready'),
        ('accelerator.aer_error', 'unhealthy')]


def test_a_fenced_device_set_ready_otherwise_is_fenced_again(host):
    h = host()
    h.counters(USER_FN, fatal=1)
    h.evaluate()
    # driver-install, a finished programming job...: not a clear.
    h.store.set_state(NODE, ALVEO, state_store.READY, 'installed')
    rows = h.evaluate()
    assert rows[ALVEO].state == state_store.UNHEALTHY
    assert rows[ALVEO].reason.startswith('PCIe AER: 1 fatal')
    # A state other than ready is the operator's: left alone.
    h.store.set_state(NODE, ALVEO, state_store.HELD, 'maintenance')
    assert h.evaluate()[ALVEO].state == state_store.HELD


def test_acknowledge_clears_and_counts_from_there(host):
    h = host()
    h.counters(USER_FN, fatal=1, correctable=7)
    h.evaluate()
    read = health.acknowledge(h.store, NODE, ALVEO, h.root)
    assert [c.summary() for c in read] == [
        '0000:d8:00.0: fatal 0, nonfatal 0, correctable 0',
        '0000:d8:00.1: fatal 1, nonfatal 0, correctable 7 '
        '(CmpltTO 1, RxErr 7)']
    assert h.effect() is None
    h.store.set_state(NODE, ALVEO, state_store.READY)
    assert h.evaluate()[ALVEO].state == state_store.READY
    assert h.effect() is None
    # The next fatal error fences again, counted from the clear.
    h.counters(USER_FN, fatal=2, correctable=7)
    rows = h.evaluate()
    cleared = time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(
        h.store.aer.counters(NODE)[ALVEO][0].baseline_at))
    assert rows[ALVEO].reason == (
        'PCIe AER: 1 fatal error(s) on 0000:d8:00.1 since %s' % cleared)


def test_acknowledge_of_a_device_without_counts_does_nothing(host):
    h = host(counters=False)
    h.evaluate()
    assert health.acknowledge(h.store, NODE, ALVEO, h.root) == []


def test_unknown_counters_take_no_effect_and_are_not_recorded(host):
    h = host(counters=False)
    rows = h.evaluate()
    assert rows[ALVEO].state == state_store.READY
    assert h.store.aer.counters(NODE) == {}
    # Garbage in the fatal file of a function with errors elsewhere: the
    # fatal count is unknown, not 0, and the others still count.
    h.counters(USER_FN)
    h.evaluate()
    h.counters(USER_FN, nonfatal=1)
    with open(aer_sysfs.function_dir(h.root, USER_FN) + '/aer_dev_fatal',
              'w') as f:
        f.write('TOTAL_ERR_FATAL lots\n')
    h.evaluate()
    rows = h.store.aer.counters(NODE)[ALVEO]
    assert {(r.function, r.severity) for r in rows} == {
        (USER_FN, 'fatal'), (USER_FN, 'nonfatal'),
        (USER_FN, 'correctable')}
    assert h.effect().effect == 'inform'


def test_disabled_records_but_takes_no_effect(host):
    h = host(health.Policy(enabled=False))
    h.counters(USER_FN, fatal=1)
    rows = h.evaluate()
    assert rows[ALVEO].state == state_store.READY
    assert h.effect() is None
    fatal = [r for r in h.store.aer.counters(NODE)[ALVEO]
             if r.severity == 'fatal' and r.function == USER_FN]
    assert (fatal[0].baseline, fatal[0].last) == (0, 1)
    assert sent() == []


def test_counts_that_went_down_were_counted_again_from_zero(host):
    h = host()
    h.counters(USER_FN, fatal=3)
    h.evaluate()
    health.acknowledge(h.store, NODE, ALVEO, h.root)
    h.store.set_state(NODE, ALVEO, state_store.READY)
    # A reboot: the kernel counts from 0 again, and saw one already.
    h.counters(USER_FN, fatal=1)
    rows = h.evaluate()
    assert rows[ALVEO].state == state_store.UNHEALTHY
    assert rows[ALVEO].reason == ('PCIe AER: 1 fatal error(s) on '
                                  '0000:d8:00.1 since the kernel began '
                                  'counting')


def test_whoever_has_a_notifier_notifies_what_another_found(host):
    h = host(notify=False)
    h.counters(USER_FN, fatal=1)
    h.evaluate()
    assert h.effect().effect == 'fence' and sent() == []
    # nova-compute (no notifier) took the effect; the agent sends it.
    agent = health.AerHealth(h.store, health.Policy(), notifier(),
                             clock=lambda: h.now)
    h.evaluate(health_=agent)
    h.evaluate(health_=agent)
    assert [(e, a) for e, _, a, _, _ in sent()] == [
        ('accelerator.aer_error', ALVEO)]
    assert h.effect().notified == 'fence'


def test_rows_of_functions_a_device_lost_are_dropped(host_tree, tmp_path):
    store = state_store.StateStore(str(tmp_path / 's.sqlite'))
    counts = {(ALVEO, 'fatal'): 0, (USER_FN, 'fatal'): 0}
    store.aer.record(NODE, {ALVEO: counts}, {ALVEO: [ALVEO, USER_FN]},
                     START, {'fatal'}, 3600)
    store.aer.record(NODE, {ALVEO: {(ALVEO, 'fatal'): 0}}, {ALVEO: [ALVEO]},
                     START + 60, {'fatal'}, 3600)
    assert [r.function for r in store.aer.counters(NODE)[ALVEO]] == [ALVEO]


def test_policy_from_conf():
    conf = cfg.ConfigOpts()
    aer_conf.register_opts(conf)
    conf([])
    assert health.Policy.from_conf(conf) == health.Policy()
    conf.set_override('correctable_effect', 'fence', 'cyborg_aer')
    conf.set_override('nonfatal_per_hour', 5, 'cyborg_aer')
    assert health.Policy.from_conf(conf) == health.Policy(
        nonfatal_per_hour=5, correctable_effect='fence')
    with pytest.raises(ValueError):
        conf.set_override('nonfatal_effect', 'reboot', 'cyborg_aer')
    # The option's choices are the store's effects.
    assert aer_conf.EFFECTS == health_table.EFFECTS
    with pytest.raises(ValueError, match='unknown AER effect'):
        health.Policy(nonfatal_effect='reboot')
