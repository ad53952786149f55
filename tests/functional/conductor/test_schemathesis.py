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

"""Generated requests against a conductor process (schemathesis).

The conductor's own OpenAPI document drives hypothesis: valid requests
(positive) and requests that break the schema (negative), with the
admin token. No answer may be a 5xx, and every answer must match the
document's schema for its status. Without a token, every operation is a
401.
"""

import hypothesis
import pytest
import requests
import schemathesis
from schemathesis import checks as st_checks
from schemathesis.specs.openapi import checks as openapi_checks

from tests import counts as report
from tests.functional.conductor import conductor_fixture as cf
from tests import fuzzing

#: Examples per generation mode, for the POSTs and for the GETs (whose
#: inputs are headers, query strings and path parameters);
#: CYBORG_NOVA_FUZZ_EXAMPLES sets them all.
POSITIVE = schemathesis.GenerationMode.POSITIVE
NEGATIVE = schemathesis.GenerationMode.NEGATIVE
EXAMPLES = {'POST': {POSITIVE: fuzzing.examples(300),
                     NEGATIVE: fuzzing.examples(200)},
            'GET': {POSITIVE: fuzzing.examples(60),
                    NEGATIVE: fuzzing.examples(60)}}
MINIMUM_REQUESTS = min(1000, sum(sum(m.values()) for m in EXAMPLES.values()))
#: Every operation but the one that serves the document.
OPERATIONS = {('POST', '/hello'), ('GET', '/agents'), ('GET', '/hardware'),
              ('GET', '/drivers'), ('POST', '/services'),
              ('POST', '/programs'), ('GET', '/programs/{id}')}
CHECKS = [st_checks.not_a_server_error,
          openapi_checks.response_schema_conformance]


@pytest.fixture(scope='module')
def conductor(tmp_path_factory):
    # Generated agents register with made-up endpoints; GET /hardware
    # must not wait long for them, and they soon turn DOWN.
    conductor = cf.Conductor(tmp_path_factory.mktemp('conductor'),
                             down_time=2, agent_timeout=0.3).start()
    yield conductor
    assert conductor.stop() == 0
    # Nothing a client sent was a bug of the service.
    assert ' ERROR ' not in conductor.log()


@pytest.fixture(scope='module')
def schema(conductor):
    return schemathesis.openapi.from_url(
        conductor.url + '/openapi.json',
        headers={'X-Auth-Token': cf.READER})


def test_generated_requests(conductor, schema):
    session = requests.Session()
    # "POST /hello positive" -> {status code: requests}
    counts = {}

    for result in schema.get_all_operations():
        operation = result.ok()
        for mode, examples in EXAMPLES[operation.method.upper()].items():
            key = '%s %s' % (operation.label, mode.value)
            counts[key] = {}

            @hypothesis.settings(
                max_examples=examples, deadline=None, database=None,
                suppress_health_check=list(hypothesis.HealthCheck))
            @hypothesis.given(case=operation.as_strategy(
                generation_mode=mode))
            def run(case):
                response = case.call(base_url=conductor.url,
                                     session=session,
                                     headers={'X-Auth-Token': cf.ADMIN})
                statuses = counts[key]
                statuses[response.status_code] = statuses.get(
                    response.status_code, 0) + 1
                case.validate_response(response, checks=CHECKS)
            run()
    total = sum(sum(statuses.values()) for statuses in counts.values())
    report.record('conductor schemathesis: %d requests, no 5xx, every '
                  'answer as documented; by status:' % total)
    for key, statuses in sorted(counts.items()):
        report.record('  conductor %-25s %s'
                      % (key, dict(sorted(statuses.items()))))
    assert total >= MINIMUM_REQUESTS
    # Every operation was exercised.
    assert {tuple(k.split()[:2]) for k, v in counts.items() if v} >= \
        OPERATIONS
    # Valid registrations got through, and invalid ones were refused.
    assert counts['POST /hello positive'].get(200, 0) > 100
    # (401: negative cases also mangle the token header.)
    assert set(counts['POST /hello negative']) <= {400, 401, 413, 415}


def test_every_operation_needs_a_token(conductor, schema):
    operations = [(method.upper(), path)
                  for path, methods in schema.raw_schema['paths'].items()
                  for method in methods]
    assert len(operations) == 8, operations
    assert ('POST', '/programs') in operations
    for method, path in operations:
        body = ({'host': 'cn1', 'status': 'READY',
                 'endpoint': 'http://cn1:6666'}
                if method == 'POST' else None)
        for token in (None, 'not-a-token'):
            status, answer, _ = conductor.call(method, path, token=token,
                                               body=body)
            assert status == 401, (method, path)
            assert answer['error']['code'] == 401
