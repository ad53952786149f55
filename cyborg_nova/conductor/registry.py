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

"""The agents the conductor-lite knows: registration, UP/DOWN, alarms.

The internal API spec leaves the conductor unable to tell an agent that
never reported from one that does not exist, but an agent that has
reported and then goes silent gets an alarm: one WARNING per silence,
raised by whichever of the monitor thread or a ``GET /agents`` sees it
first (the database decides, see :meth:`db.AgentStore.
claim_down_alarms`).
"""

from __future__ import annotations

import datetime
import logging
import threading
from typing import Callable

from cyborg_nova.conductor import db

LOG = logging.getLogger(__name__)

UP = 'UP'
DOWN = 'DOWN'


def isoformat(value: datetime.datetime) -> str:
    """ISO 8601 with the UTC offset, for a naive UTC datetime.

    Always with microseconds, so that every time has the same shape.
    """
    return value.replace(tzinfo=datetime.timezone.utc).isoformat(
        timespec='microseconds')


class Registry:
    """Agents in ``store``; DOWN after ``down_time`` seconds of silence.

    :param clock: returns now as a naive UTC datetime (tests pass their
        own).
    """

    def __init__(self, store: db.AgentStore, down_time: float,
                 clock: Callable[[], datetime.datetime] = db.utcnow
                 ) -> None:
        self.store = store
        self.down_time = datetime.timedelta(seconds=down_time)
        self.clock = clock
        # A claim and its log line, as one: a listing waits for the
        # monitor's alarm to be written.
        self._alarming = threading.Lock()

    def record(self, agent: db.Agent, now: datetime.datetime) -> dict:
        """The API's view of ``agent`` at ``now``."""
        return {
            'host': agent.host,
            'endpoint': agent.endpoint,
            'status': agent.status,
            'state': DOWN if agent.is_down(now, self.down_time) else UP,
            'first_seen': isoformat(agent.first_seen),
            'last_seen': isoformat(agent.last_seen),
        }

    def hello(self, host: str, endpoint: str, status: str) -> dict:
        """Register ``host`` or record its heartbeat; its record."""
        now = self.clock()
        agent, came_back = self.store.heartbeat(host, endpoint, status,
                                                now)
        if agent.first_seen == now:
            LOG.info('Agent %s registered: %s, status %s', host, endpoint,
                     status)
        elif came_back:
            LOG.info('Agent %s is UP again: %s, status %s', host, endpoint,
                     status)
        return self.record(agent, now)

    def agents(self) -> list[dict]:
        """Every agent with its state; raises any alarm due first.

        So that an agent listed DOWN has had its alarm logged: the alarms
        are claimed at the same moment the states are computed for, and
        an alarm another thread has claimed is written before this
        returns.
        """
        now = self.clock()
        self.check_down(now)
        return [self.record(agent, now) for agent in self.store.list()]

    def up_agents(self) -> list[db.Agent]:
        """The agents that are UP now."""
        now = self.clock()
        return [agent for agent in self.store.list()
                if not agent.is_down(now, self.down_time)]

    def check_down(self, now: datetime.datetime | None = None
                   ) -> list[db.Agent]:
        """Log the alarm of every agent DOWN at ``now``; those it claimed.

        :param now: the moment to judge at; the clock's now by default.
        """
        with self._alarming:
            now = now or self.clock()
            newly_down = self.store.claim_down_alarms(now - self.down_time)
            for agent in newly_down:
                LOG.warning(
                    'Agent %s is DOWN: no heartbeat since %s (%.1f s ago, '
                    'agent_down_time is %.0f s); endpoint %s, last status '
                    '%s', agent.host, isoformat(agent.last_seen),
                    (now - agent.last_seen).total_seconds(),
                    self.down_time.total_seconds(), agent.endpoint,
                    agent.status)
        return newly_down


def check_interval(down_time: float) -> float:
    """How often the monitor looks: an eighth of ``down_time``, in bounds.

    An eighth keeps the alarm within 12.5% of ``down_time`` of the
    moment the agent turned DOWN, for one cheap query per round; the
    bounds keep tiny test values from spinning and large ones from
    delaying the alarm by minutes.
    """
    return min(max(down_time / 8.0, 0.1), 5.0)


class Monitor:
    """A daemon thread calling :meth:`Registry.check_down` periodically."""

    def __init__(self, registry: Registry, interval: float) -> None:
        self.registry = registry
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run,
                                        name='agent-monitor', daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        failing = False
        while not self._stop.wait(self.interval):
            try:
                self.registry.check_down()
            except Exception:
                # A database outage must not end the monitoring, nor
                # fill the log with one traceback per round.
                if not failing:
                    LOG.exception('Checking for DOWN agents failed; '
                                  'retrying every %g s', self.interval)
                failing = True
                continue
            if failing:
                LOG.info('Checking for DOWN agents works again')
                failing = False

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
