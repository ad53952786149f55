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

"""The hardware collector in-process against real (fake) agent servers.

Agents that answer badly in every way cost at most ``agent_timeout``
and end up in ``errors``; good entries of a partly bad answer are kept.
"""

import time

import pytest

from cyborg_nova.conductor import db
from cyborg_nova.conductor import hardware
from tests.functional.conductor import fake_agent

TOKEN = 'agent-token'
ENTRY = {
    'uuid': '8e45a2ea-5364-4b0d-a252-bf8becaa606e',
    'acc_specs': {'remote': 0, 'num': 1, 'device_type': 'CRYPTO',
                  'acc_capability': {'num': 2, 'ipsec': {
                      'aes': {'3des': 50, 'num': 1}}}},
    'acc_status': {'setup_required': True, 'reboot_required': False},
    'driver': 'intel_qat',
}


@pytest.fixture
def agents():
    started = []

    def start(**kwargs):
        kwargs.setdefault('token', TOKEN)
        agent = fake_agent.FakeAgent(**kwargs)
        started.append(agent)
        return agent
    yield start
    for agent in started:
        agent.stop()


def record(host, agent):
    now = db.utcnow()
    return db.Agent(host, agent.url if agent else 'http://127.0.0.1:9',
                    'READY', now, now, False)


def collect(*pairs, timeout=1.0, token=TOKEN):
    collector = hardware.Collector(token, timeout)
    return collector.collect([record(h, a) for h, a in pairs])


def test_entries_annotated_and_extra_keys_kept(agents):
    agent = agents(hardware=[ENTRY])
    result = collect(('cn1', agent))
    assert result['hardware'] == [dict(ENTRY, host='cn1', usage=None)]
    # Without Placement, the unknown usage is an error of the host.
    assert result['errors'] == [{'host': 'cn1', 'message': (
        'usage of 1 device(s) unknown: Placement is not configured '
        '([placement] auth_type is unset)')}]
    assert agent.requests == [('/hardware', TOKEN)]


def test_no_agents():
    assert collect() == {'hardware': [], 'errors': []}


def test_empty_hardware_is_no_error(agents):
    assert collect(('cn1', agents())) == {'hardware': [], 'errors': []}


def test_invalid_entries_dropped_others_kept(agents):
    bad_status = dict(ENTRY, acc_status={'setup_required': 'yes',
                                         'reboot_required': False})
    no_specs = {k: v for k, v in ENTRY.items() if k != 'acc_specs'}
    agent = agents(hardware=[bad_status, ENTRY, 'junk', no_specs])
    result = collect(('cn1', agent))
    assert [e['uuid'] for e in result['hardware']] == [ENTRY['uuid']]
    messages = [e['message'] for e in result['errors']]
    assert messages[:3] == [
        "hardware entry 0 is invalid at acc_status/setup_required: 'yes' "
        "is not of type 'boolean'",
        "hardware entry 2 is invalid: 'junk' is not of type 'object'",
        "hardware entry 3 is invalid: 'acc_specs' is a required property",
    ]


@pytest.mark.parametrize('kwargs, message', [
    ({'raw': b'<html>'}, 'did not answer JSON'),
    ({'raw': b'{"devices": []}'}, "answered no hardware list: "
                                  "'hardware' is a required property"),
    ({'raw': b'{"hardware": {}}'}, 'answered no hardware list'),
    ({'raw': b'[]'}, 'answered no hardware list'),
    ({'token': 'another'}, 'answered 401: authentication required'),
    ({'delay': 5}, 'no answer within 1 s'),
    ({'trickle': 0.2, 'hardware': [ENTRY]}, 'no answer within 1 s'),
])
def test_bad_agents_are_errors(agents, kwargs, message):
    start = time.monotonic()
    result = collect(('cn1', agents(**kwargs)))
    assert time.monotonic() - start < 2.5
    assert result['hardware'] == []
    assert len(result['errors']) == 1
    assert result['errors'][0]['host'] == 'cn1'
    assert message in result['errors'][0]['message']


def test_unreachable_agent():
    result = collect(('cn1', None))
    assert result['hardware'] == []
    assert 'Connection refused' in result['errors'][0]['message']


def test_oversized_answer(agents, monkeypatch):
    monkeypatch.setattr(hardware, 'MAX_AGENT_RESPONSE', 1000)
    result = collect(('cn1', agents(hardware=[ENTRY] * 10)))
    assert 'answered more than 1000 bytes' in result['errors'][0][
        'message']


def test_slow_agents_asked_concurrently(agents):
    pairs = [('slow%d' % i, agents(delay=5)) for i in range(4)]
    pairs.append(('fast', agents(hardware=[ENTRY])))
    start = time.monotonic()
    result = collect(*pairs)
    took = time.monotonic() - start
    # Four slow agents in a row would take 4 s.
    assert took < 2.0, took
    assert [e['host'] for e in result['hardware']] == ['fast']
    assert sorted(e['host'] for e in result['errors']) == [
        'fast', 'slow0', 'slow1', 'slow2', 'slow3']


def test_no_token_configured(agents):
    result = collect(('cn1', agents()), token=None)
    assert 'answered 401' in result['errors'][0]['message']


def test_redirect_not_followed(agents):
    elsewhere = agents(hardware=[ENTRY], token=None)
    result = collect(('cn1', agents(location=elsewhere.url + '/hardware')))
    assert result['hardware'] == []
    assert 'answered 302' in result['errors'][0]['message']
    # The agent token did not travel there.
    assert elsewhere.requests == []
