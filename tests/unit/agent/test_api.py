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

"""The agent's routes: validation, policy, and bodies as documented."""

import copy
import json

import jsonschema
from oslo_config import cfg
import pytest
import webob

from cyborg_nova.agent import api
from cyborg_nova.agent import remote
from cyborg_nova.conf import agent as agent_conf

ADMIN, READER = 'admin-token', 'reader-token'
LOCAL = {
    'uuid': 'b7d42d39-8815-5321-996f-489fd72ecf30',
    'acc_specs': {'remote': 0, 'num': 1, 'device_type': 'FPGA',
                  'acc_capability': {'num': 1}},
    'acc_status': {'setup_required': False, 'reboot_required': False},
    'driver': 'intel_fpga', 'state': 'ready',
    'health': {'healthy': True, 'problems': []},
}


class Client:
    def hardware(self, endpoint):
        return [], []

    def discover(self, endpoint):
        pass


@pytest.fixture
def agent():
    conf = cfg.ConfigOpts()
    conf([])
    agent_conf.register_opts(conf)
    conf.set_override('admin_token', ADMIN, 'cyborg_agent')
    conf.set_override('reader_token', READER, 'cyborg_agent')
    discoveries = []
    registry = remote.Registry(3, 10, client=Client())
    app = api.build_app(conf, lambda: [LOCAL] + registry.hardware(),
                        lambda: discoveries.append(1), registry)
    return app, discoveries, registry


def call(app, method, path, token=ADMIN, body=None, raw=None,
         content_type='application/json'):
    request = webob.Request.blank(path, method=method)
    if token:
        request.headers['X-Auth-Token'] = token
    if body is not None or raw is not None:
        request.body = raw if raw is not None else json.dumps(body).encode()
        request.content_type = content_type
    response = request.get_response(app)
    return response, json.loads(response.text or 'null')


def nullable(schema):
    """OpenAPI 3.0's ``nullable`` as JSON Schema, to validate with."""
    schema = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if node.pop('nullable', False):
                node['type'] = [node['type'], 'null']
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(schema)
    return schema


def documented(app, method, path, status, body):
    """Validate ``body`` against the document's schema for the answer."""
    document = app.openapi()
    response = document['paths'][path][method.lower()]['responses'][
        str(status)]
    schema = response['content']['application/json']['schema']
    jsonschema.validate(body, nullable(schema))


HELLO = {'status': 'READY', 'endpoint': 'http://127.0.0.1:1337',
         'type': 'CRYPTO'}


def test_discovery_is_accepted_and_started(agent):
    app, discoveries, _ = agent
    response, body = call(app, 'POST', '/discovery')
    assert response.status_int == 202
    assert body == {'status': 'IN-PROGRESS'}
    assert discoveries == [1]
    documented(app, 'POST', '/discovery', 202, body)


def test_hello_registers_and_lists(agent):
    app, _, registry = agent
    response, body = call(app, 'POST', '/hello', body=HELLO)
    assert response.status_int == 200, body
    assert body['driver']['endpoint'] == HELLO['endpoint']
    documented(app, 'POST', '/hello', 200, body)
    response, body = call(app, 'GET', '/drivers', READER)
    assert [d['endpoint'] for d in body['drivers']] == [HELLO['endpoint']]
    documented(app, 'GET', '/drivers', 200, body)


def test_hardware_is_documented(agent):
    app, _, registry = agent
    call(app, 'POST', '/hello', body=HELLO)
    registry.poll(HELLO['endpoint'])
    response, body = call(app, 'GET', '/hardware', READER)
    assert response.status_int == 200
    documented(app, 'GET', '/hardware', 200, body)


@pytest.mark.parametrize('body, status, words', [
    (dict(HELLO, endpoint='ftp://localhost:1337'), 400, 'http or https'),
    (dict(HELLO, endpoint='local_host:1337'), 400, 'neither a host name'),
    (dict(HELLO, endpoint='http://'), 400, 'no host'),
    (dict(HELLO, extra=1), 400, 'Additional properties'),
    ({'status': 'READY', 'endpoint': 'http://a'}, 400, "'type'"),
    (dict(HELLO, status='BUSY'), 400, 'status'),
    (dict(HELLO, type='TOASTER'), 400, 'type'),
    (dict(HELLO, endpoint=7), 400, 'endpoint'),
    ([HELLO], 400, 'not of type'),
])
def test_hello_validation(agent, body, status, words):
    app, _, registry = agent
    response, answer = call(app, 'POST', '/hello', body=body)
    assert response.status_int == status, answer
    assert words in answer['error']['message']
    assert registry.drivers() == []


def test_malformed_oversized_and_mistyped_bodies(agent):
    app, _, _ = agent
    response, body = call(app, 'POST', '/hello', raw=b'{"status":')
    assert response.status_int == 400
    assert 'not valid JSON' in body['error']['message']
    response, _ = call(app, 'POST', '/hello',
                       raw=b'{"a": "%s"}' % (b'x' * 70000))
    assert response.status_int == 413
    response, _ = call(app, 'POST', '/hello', raw=b'x',
                       content_type='text/plain')
    assert response.status_int == 415
    response, _ = call(app, 'POST', '/discovery', body={})
    assert response.status_int == 400


def test_tokens_and_roles(agent):
    app, discoveries, _ = agent
    for method, path in (('POST', '/discovery'), ('GET', '/hardware'),
                         ('POST', '/hello'), ('GET', '/drivers'),
                         ('GET', '/openapi.json')):
        response, body = call(app, method, path, token=None)
        assert response.status_int == 401, path
        response, body = call(app, method, path, token='guess')
        assert response.status_int == 401, path
    for method, path, body in (('POST', '/discovery', None),
                               ('POST', '/hello', HELLO)):
        response, answer = call(app, method, path, READER, body=body)
        assert response.status_int == 403, path
    assert discoveries == []


def test_405_says_what_is_allowed(agent):
    app, _, _ = agent
    response, body = call(app, 'PUT', '/hardware')
    assert response.status_int == 405
    assert response.headers['Allow'] == 'GET'


def test_full_registry_is_a_documented_409(agent):
    app, _, registry = agent
    registry.max_drivers = 1
    call(app, 'POST', '/hello', body=HELLO)
    response, body = call(app, 'POST', '/hello',
                          body=dict(HELLO, endpoint='http://other'))
    assert response.status_int == 409
    documented(app, 'POST', '/hello', 409, body)


def test_the_document_is_complete(agent):
    app, _, _ = agent
    document = app.openapi()
    operations = {(m.upper(), p) for p, item in document['paths'].items()
                  for m in item}
    assert operations == {('POST', '/discovery'), ('GET', '/hardware'),
                          ('POST', '/hello'), ('GET', '/drivers'),
                          ('POST', '/services'),
                          ('POST', '/program'), ('GET', '/program/{job}'),
                          ('GET', '/openapi.json')}
    for path, item in document['paths'].items():
        for method, op in item.items():
            ok = [c for c in op['responses'] if c.startswith('2')]
            assert op['responses'][ok[0]]['content'], (method, path)
            assert op['x-policy-rule'].startswith('cyborg_nova:agent:')
    hello = document['paths']['/hello']['post']
    assert hello['requestBody']['content']['application/json']['schema'][
        'additionalProperties'] is False
