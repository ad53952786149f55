"""The agent's API against its own OpenAPI document, with schemathesis.

schemathesis (its command line, as a CI job would run it) generates
requests from the document the agent serves, valid and invalid, sends
them to a real agent process and checks every answer: no 5xx, status
codes, content types and bodies as documented, authentication enforced,
405s for undeclared methods. The HAR report counts what was sent.
"""

import glob
import json
import os
import subprocess
import sys

import pytest

from tests.functional.agent import base

SCHEMATHESIS = os.path.join(os.path.dirname(sys.executable), 'schemathesis')
#: Requests that must have been sent.
MINIMUM = 1000
#: Generated per operation at most; most come from POST /hello, the one
#: operation with a body, so a margin keeps the total above MINIMUM.
MAX_EXAMPLES = 1200


@pytest.fixture
def agent(host, placement, tmp_path):
    agent = base.AgentProcess(str(tmp_path), {
        'cyborg_agent': {'driver_poll_interval': '1'},
        'cyborg_nova': {'sysfs_root': host.sysfs_root,
                        'state_path': str(tmp_path / 'state.sqlite'),
                        'auto_ready': 'True'},
        'placement': {'auth_type': 'admin_token',
                      'endpoint': placement.endpoint, 'token': 'admin'},
    }, name='fuzzed-agent')
    agent.setUp()
    yield agent
    agent.cleanUp()


def test_every_operation_needs_a_token(agent):
    document = agent.call('GET', '/openapi.json', base.READER).json()
    operations = [(method.upper(), path)
                  for path, item in document['paths'].items()
                  for method in item]
    assert len(operations) == 5
    for method, path in operations:
        resp = agent.call(method, path, token=None)
        assert resp.status_code == 401, (method, path, resp.text)
        assert resp.json()['error']['code'] == 401
        # Every operation documents its response body.
        op = document['paths'][path][method.lower()]
        ok = [c for c in op['responses'] if c.startswith('2')]
        assert op['responses'][ok[0]]['content']['application/json'][
            'schema'], (method, path)


@pytest.mark.skipif(not os.path.exists(SCHEMATHESIS),
                    reason='schemathesis is not installed')
def test_schemathesis_finds_no_failure(agent, tmp_path):
    report_dir = str(tmp_path / 'report')
    proc = subprocess.run(
        [SCHEMATHESIS, 'run', agent.url + '/openapi.json',
         '--header', 'X-Auth-Token: %s' % base.ADMIN,
         '--checks', 'all', '--max-examples', str(MAX_EXAMPLES),
         '--seed', '20240901', '--report', 'har,json',
         '--report-dir', report_dir, '--workers', '2'],
        cwd=str(tmp_path), capture_output=True, text=True, timeout=300,
        env=dict(os.environ, NO_COLOR='1'))
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    (har,) = glob.glob(os.path.join(report_dir, 'har-*.json'))
    with open(har) as f:
        entries = json.load(f)['log']['entries']
    statuses = [e['response']['status'] for e in entries]
    print('\nschemathesis: %d requests, no 5xx; by status: %s'
          % (len(entries),
             {s: statuses.count(s) for s in sorted(set(statuses))}))
    assert len(entries) >= MINIMUM
    assert not [s for s in statuses if s >= 500]
    # The agent is still whole after all that.
    assert agent.call('GET', '/hardware', base.READER).ok
    assert 'Traceback' not in agent.log()
