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

"""The agents table and the UP/DOWN logic, on real databases.

Each test runs on SQLite, MariaDB and PostgreSQL (the ``db_url`` fixture
of tests/conftest.py: private servers, a fresh database per test).
"""

import datetime
import logging
import threading

from oslo_config import cfg
import pytest

from cyborg_nova.conductor import db
from cyborg_nova.conductor import registry
from cyborg_nova.conf import conductor as conductor_conf

T0 = datetime.datetime(2030, 1, 1, 12, 0, 0)
SECOND = datetime.timedelta(seconds=1)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now=T0):
        self.now = now

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += datetime.timedelta(seconds=seconds)


@pytest.fixture
def conf(db_url):
    conf = cfg.ConfigOpts()
    conductor_conf.register_opts(conf)
    conf([])
    conf.set_override('connection', db_url, group='database')
    return conf


@pytest.fixture
def store(conf):
    engine = db.engine_from_conf(conf)
    yield db.AgentStore(engine)
    engine.dispose()


def test_register_then_heartbeat(store):
    agent, came_back = store.heartbeat('cn1', 'http://cn1:6666', 'READY',
                                       T0)
    assert not came_back
    assert agent == db.Agent('cn1', 'http://cn1:6666', 'READY', T0, T0,
                             False)
    agent, came_back = store.heartbeat('cn1', 'https://cn1:6666/x',
                                       'DRAINING', T0 + SECOND)
    assert not came_back
    # first_seen stays; the rest is the latest report.
    assert agent == db.Agent('cn1', 'https://cn1:6666/x', 'DRAINING', T0,
                             T0 + SECOND, False)
    assert store.get('cn1') == agent
    assert store.get('cn2') is None


def test_list_by_host(store):
    for host in ('b', 'c', 'a'):
        store.heartbeat(host, 'http://%s:1' % host, 'READY', T0)
    assert [a.host for a in store.list()] == ['a', 'b', 'c']


def test_host_names_are_case_sensitive(store):
    store.heartbeat('CN1', 'http://a:1', 'READY', T0)
    store.heartbeat('cn1', 'http://b:1', 'READY', T0)
    assert [(a.host, a.endpoint) for a in store.list()] == [
        ('CN1', 'http://a:1'), ('cn1', 'http://b:1')]


def test_claim_down_alarms_once(store):
    store.heartbeat('old', 'http://old:1', 'READY', T0)
    store.heartbeat('new', 'http://new:1', 'READY', T0 + 10 * SECOND)
    cutoff = T0 + 5 * SECOND
    assert [a.host for a in store.claim_down_alarms(cutoff)] == ['old']
    assert store.claim_down_alarms(cutoff) == []
    assert store.get('old').down_alarmed
    # The comeback clears the alarm and says so, once.
    agent, came_back = store.heartbeat('old', 'http://old:1', 'READY',
                                       T0 + 20 * SECOND)
    assert came_back and not agent.down_alarmed
    assert not store.heartbeat('old', 'http://old:1', 'READY',
                               T0 + 21 * SECOND)[1]
    # Silent again: a new alarm.
    assert [a.host for a in store.claim_down_alarms(
        T0 + 30 * SECOND)] == ['new', 'old']


def test_concurrent_claims_alarm_once(store):
    store.heartbeat('cn1', 'http://cn1:1', 'READY', T0)
    claimed = []
    barrier = threading.Barrier(8)

    def claim():
        barrier.wait()
        claimed.extend(store.claim_down_alarms(T0 + SECOND))
    threads = [threading.Thread(target=claim) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [a.host for a in claimed] == ['cn1']


def test_concurrent_first_hellos_make_one_row(store):
    # Several rounds: on MariaDB, two first hellos of one host used to
    # deadlock (both UPDATEs take a gap lock, then both INSERT) about one
    # round in fifteen; the loser is now run again.
    errors = []
    for round_ in range(10):
        barrier = threading.Barrier(8)

        def hello(i):
            barrier.wait()
            try:
                store.heartbeat('cn%d' % round_, 'http://cn:%d' % (i + 1),
                                'READY', T0)
            except Exception as exc:
                errors.append(exc)
        threads = [threading.Thread(target=hello, args=(i,))
                   for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == []
    assert [a.host for a in store.list()] == ['cn%d' % i for i in range(10)]


def test_tables_survive_reopening(conf):
    engine = db.engine_from_conf(conf)
    db.AgentStore(engine).heartbeat('cn1', 'http://cn1:1', 'READY', T0)
    engine.dispose()
    engine = db.engine_from_conf(conf)
    assert db.AgentStore(engine).get('cn1').last_seen == T0
    engine.dispose()


def test_down_after_down_time(store):
    clock = Clock()
    reg = registry.Registry(store, down_time=60, clock=clock)
    record = reg.hello('cn1', 'http://cn1:1', 'READY')
    assert record == {
        'host': 'cn1', 'endpoint': 'http://cn1:1', 'status': 'READY',
        'state': 'UP', 'first_seen': '2030-01-01T12:00:00.000000+00:00',
        'last_seen': '2030-01-01T12:00:00.000000+00:00'}
    clock.advance(60)
    # Exactly agent_down_time of silence is still UP: "longer than".
    assert [a['state'] for a in reg.agents()] == ['UP']
    assert [a.host for a in reg.up_agents()] == ['cn1']
    clock.advance(0.001)
    assert [a['state'] for a in reg.agents()] == ['DOWN']
    assert reg.up_agents() == []


def test_alarm_logged_once_per_silence(store, caplog):
    caplog.set_level(logging.INFO, logger='cyborg_nova.conductor')
    clock = Clock()
    reg = registry.Registry(store, down_time=60, clock=clock)
    reg.hello('cn1', 'http://cn1:1', 'READY')
    reg.hello('cn2', 'http://cn2:1', 'READY')
    clock.advance(30)
    reg.hello('cn2', 'http://cn2:1', 'READY')
    clock.advance(31)

    def alarms():
        return [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [a.host for a in reg.check_down()] == ['cn1']
    reg.agents()
    reg.check_down()
    assert len(alarms()) == 1
    message = alarms()[0].getMessage()
    assert message.startswith('Agent cn1 is DOWN: no heartbeat since '
                              '2030-01-01T12:00:00.000000+00:00 (61.0 s ago')
    # Back UP, then silent again: one more alarm.
    reg.hello('cn1', 'http://cn1:1', 'READY')
    assert 'Agent cn1 is UP again' in caplog.text
    clock.advance(61)
    assert sorted(a.host for a in reg.check_down()) == ['cn1', 'cn2']
    assert [r.getMessage().split(' is DOWN')[0] for r in alarms()] == [
        'Agent cn1', 'Agent cn1', 'Agent cn2']


class SteppingClock(Clock):
    """A clock that moves on by ``step`` seconds each time it is read."""

    def __init__(self, step):
        super().__init__()
        self.step = datetime.timedelta(seconds=step)

    def __call__(self):
        now = self.now
        self.now += self.step
        return now


def test_an_agent_listed_down_has_had_its_alarm(store, caplog):
    # Each reading of the clock is 1 s later: an agent whose silence
    # turns longer than agent_down_time between two readings must not be
    # listed DOWN without its alarm (seen under load: the listing read
    # the clock once to claim alarms and again to judge the states).
    caplog.set_level(logging.WARNING, logger='cyborg_nova.conductor')
    clock = SteppingClock(1)
    reg = registry.Registry(store, down_time=60, clock=clock)
    reg.hello('cn1', 'http://cn1:1', 'READY')
    clock.now += datetime.timedelta(seconds=59)
    for _ in range(5):
        states = [a['state'] for a in reg.agents()]
        alarmed = [r for r in caplog.records
                   if r.levelno == logging.WARNING]
        assert len(alarmed) == states.count('DOWN'), (states, alarmed)


def test_a_listing_waits_for_the_alarm_another_thread_claimed(
        store, caplog):
    caplog.set_level(logging.WARNING, logger='cyborg_nova.conductor')
    clock = Clock()
    reg = registry.Registry(store, down_time=60, clock=clock)
    reg.hello('cn1', 'http://cn1:1', 'READY')
    clock.advance(61)
    claimed = threading.Event()
    release = threading.Event()
    real = store.claim_down_alarms

    def slow_claim(cutoff):
        # The monitor thread has claimed the alarm and not yet logged it.
        found = real(cutoff)
        claimed.set()
        release.wait(10)
        return found
    store.claim_down_alarms = slow_claim
    monitor = threading.Thread(target=reg.check_down)
    monitor.start()
    assert claimed.wait(10)
    store.claim_down_alarms = real
    listed = []
    lister = threading.Thread(target=lambda: listed.extend(reg.agents()))
    lister.start()
    lister.join(0.5)
    # The listing waits for the claim's log line.
    assert listed == []
    release.set()
    monitor.join(10)
    lister.join(10)
    assert [a['state'] for a in listed] == ['DOWN']
    assert len([r for r in caplog.records
                if r.levelno == logging.WARNING]) == 1


def test_monitor_thread_raises_alarm(store, caplog):
    caplog.set_level(logging.WARNING, logger='cyborg_nova.conductor')
    clock = Clock()
    reg = registry.Registry(store, down_time=1, clock=clock)
    reg.hello('cn1', 'http://cn1:1', 'READY')
    clock.advance(2)
    monitor = registry.Monitor(reg, interval=0.01)
    monitor.start()
    try:
        for _ in range(500):
            if store.get('cn1').down_alarmed:
                break
            threading.Event().wait(0.01)
    finally:
        monitor.stop()
    assert caplog.text.count('Agent cn1 is DOWN') == 1


@pytest.mark.parametrize('down_time, interval', [
    (60, 5.0), (2, 0.25), (0.2, 0.1), (3600, 5.0)])
def test_check_interval(down_time, interval):
    assert registry.check_interval(down_time) == interval
