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

"""The collector keeps one client per agent, at its current endpoint."""

import datetime

from cyborg_nova.conductor import db
from cyborg_nova.conductor import hardware


def _agent(host, endpoint):
    now = datetime.datetime(2026, 1, 1)
    return db.Agent(host=host, endpoint=endpoint, status='UP',
                    first_seen=now, last_seen=now, down_alarmed=False)


def test_an_agent_registered_again_elsewhere_leaves_no_client_behind():
    collector = hardware.Collector('token', 5.0)
    first = collector.client(_agent('cn1', 'http://192.0.2.1:6666'))
    other = collector.client(_agent('cn2', 'http://192.0.2.2:6666'))
    assert collector.client(_agent('cn1', 'http://192.0.2.1:6666')) is first
    moved = collector.client(_agent('cn1', 'http://192.0.2.1:7777'))
    assert moved is not first
    assert moved.base_url == 'http://192.0.2.1:7777'
    assert set(collector._clients) == {('cn1', 'http://192.0.2.1:7777'),
                                       ('cn2', 'http://192.0.2.2:6666')}
    assert collector.client(_agent('cn2', 'http://192.0.2.2:6666')) is other
