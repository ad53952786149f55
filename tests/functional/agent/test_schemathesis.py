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
import re
import subprocess
import sys
import urllib.parse

import pytest

from tests import counts
from tests.functional.agent import base
from tests import fuzzing

SCHEMATHESIS = os.path.join(os.path.dirname(sys.executable), 'schemathesis')
#: Every operation of the document (GET /openapi.json is the document).
OPERATIONS = {('POST', '/discovery'), ('GET', '/hardware'),
              ('POST', '/hello'), ('GET', '/drivers'), ('POST', '/services'),
              ('POST', '/program'),
              ('GET', '/program/{job}'), ('GET', '/openapi.json')}
#: Generated per operation at most (CYBORG_NOVA_FUZZ_EXAMPLES for more);
#: most come from the operations with a body or a path parameter.
MAX_EXAMPLES = fuzzing.examples(400)
#: Requests that must have been sent.
MINIMUM = min(1000, 2 * MAX_EXAMPLES)


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
    assert len(operations) == 8, operations
    assert ('POST', '/program') in operations
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
         # An endpoint the schema's pattern allows may still be refused
         # (port over 65535, a label over 63 characters): a 400 with
         # the reason, not a failure.
         '--exclude-checks', 'positive_data_acceptance',
         '--seed', '20240901', '--report', 'har,json',
         '--report-dir', report_dir, '--workers', '2'],
        cwd=str(tmp_path), capture_output=True, text=True, timeout=300,
        env=dict(os.environ, NO_COLOR='1'))
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    (har,) = glob.glob(os.path.join(report_dir, 'har-*.json'))
    with open(har) as f:
        entries = json.load(f)['log']['entries']
    statuses = [e['response']['status'] for e in entries]
    counts.record('agent schemathesis: %d requests, no 5xx; by status: %s'
                  % (len(entries),
                     {s: statuses.count(s) for s in sorted(set(statuses))}))
    by_operation = {}
    for entry in entries:
        path = urllib.parse.urlsplit(entry['request']['url']).path
        path = re.sub(r'^/program/.*', '/program/{job}', path)
        key = '%s %s' % (entry['request']['method'], path)
        by_operation.setdefault(key, {})
        status = entry['response']['status']
        by_operation[key][status] = by_operation[key].get(status, 0) + 1
    documented = {'%s %s' % op for op in OPERATIONS}
    for key, by_status in sorted(by_operation.items()):
        if key in documented:
            counts.record('  agent %-22s %s'
                          % (key, dict(sorted(by_status.items()))))
    undeclared = [s for key, by_status in by_operation.items()
                  if key not in documented
                  for s, n in by_status.items() for _ in range(n)]
    counts.record('  agent undeclared methods     %d requests, statuses %s'
                  % (len(undeclared), sorted(set(undeclared))))
    assert len(entries) >= MINIMUM
    assert not [s for s in statuses if s >= 500]
    # Every operation was exercised (the document serves itself).
    assert {tuple(k.split(' ', 1)) for k in by_operation} >= (
        OPERATIONS - {('GET', '/openapi.json')})
    # The agent is still whole after all that.
    assert agent.call('GET', '/hardware', base.READER).ok
    assert 'Traceback' not in agent.log()
