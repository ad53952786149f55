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

"""The REST framework: every client mistake is a 4xx with a JSON reason."""

import json

from oslo_config import cfg
from oslo_policy import policy
import pytest
import webob

from cyborg_nova.api import app as api_app
from cyborg_nova.conf import api as api_conf

RULES = [
    policy.RuleDefault('test:read', 'role:reader or role:admin'),
    policy.RuleDefault('test:write', 'role:admin'),
]
BODY = {'type': 'object', 'additionalProperties': False,
        'required': ['name'],
        'properties': {'name': {'type': 'string', 'maxLength': 8},
                       'count': {'type': 'integer', 'minimum': 0}}}


def make_app(**opts):
    conf = cfg.ConfigOpts()
    conf([])
    api_conf.register_opts(conf, 'test_api')
    conf.set_override('admin_token', 'secret-admin', group='test_api')
    conf.set_override('reader_token', 'secret-reader', group='test_api')
    for key, value in opts.items():
        conf.set_override(key, value, group='test_api')
    things = {}

    def put(request, name, body):
        things[name] = body
        return 201, body

    def get(request, name):
        if name not in things:
            raise api_app.HTTPError(404, 'no thing %s' % name)
        return 200, things[name]
    routes = [
        api_app.Route('PUT', '/things/{name}', put, 'test:write', 'Put',
                      body=BODY, status=201),
        api_app.Route('GET', '/things/{name}', get, 'test:read', 'Get'),
    ]
    return api_app.Application('test', '1.0', routes, conf, 'test_api',
                               RULES)


def call(app, method, path, token='secret-admin', body=None,
         content_type='application/json', raw=None):
    request = webob.Request.blank(path, method=method)
    if token:
        request.headers['X-Auth-Token'] = token
    if body is not None or raw is not None:
        request.body = raw if raw is not None else json.dumps(body).encode()
        request.content_type = content_type
    response = request.get_response(app)
    return response.status_int, json.loads(response.text or 'null')


def test_round_trip():
    app = make_app()
    assert call(app, 'PUT', '/things/a', body={'name': 'x'}) == (
        201, {'name': 'x'})
    assert call(app, 'GET', '/things/a', token='secret-reader') == (
        200, {'name': 'x'})


@pytest.mark.parametrize('kwargs, code, message', [
    ({'token': None}, 401, 'authentication required'),
    ({'token': 'wrong'}, 401, 'authentication required'),
    ({'token': 'secret-reader'}, 403, 'policy does not allow PUT'),
    ({'body': None}, 400, 'a JSON request body is required'),
    ({'raw': b'{"name": '}, 400, 'not valid JSON'),
    ({'raw': b'\xff\xfe'}, 400, 'not valid JSON'),
    ({'body': {'name': 'x'}, 'content_type': 'text/plain'}, 415,
     'must be application/json'),
    ({'body': {'name': 'x', 'extra': 1}}, 400,
     "Additional properties are not allowed ('extra' was unexpected)"),
    ({'body': {'name': 'x', 'count': 'many'}}, 400,
     "invalid request body at count: 'many' is not of type 'integer'"),
    ({'body': {'count': 1}}, 400, "'name' is a required property"),
    ({'body': {'name': 'x' * 70000}}, 413, 'larger than the 65536'),
])
def test_put_errors(kwargs, code, message):
    app = make_app()
    status, body = call(app, 'PUT', '/things/a', **kwargs)
    assert status == code
    assert body['error']['code'] == code
    assert message in body['error']['message']


def test_not_found_and_method():
    app = make_app()
    assert call(app, 'GET', '/nothing')[0] == 404
    status, body = call(app, 'DELETE', '/things/a')
    assert status == 405
    assert 'allowed: GET, PUT' in body['error']['message']
    assert call(app, 'GET', '/things/zz')[1]['error']['message'] == (
        'no thing zz')
    # A body where none is taken.
    assert call(app, 'GET', '/things/a', body={'x': 1})[0] == 400


def test_unauthenticated_checked_before_existence():
    app = make_app()
    assert call(app, 'GET', '/things/zz', token=None)[0] == 401


def test_no_tokens_configured_means_no_access():
    app = make_app(admin_token=None, reader_token=None)
    assert call(app, 'GET', '/things/a', token='')[0] == 401


def test_unknown_rule_is_a_programming_error():
    conf = cfg.ConfigOpts()
    conf([])
    api_conf.register_opts(conf, 'test_api')
    with pytest.raises(ValueError):
        api_app.Application('t', '1', [api_app.Route(
            'GET', '/', lambda r: (200, {}), 'test:nope', 'x')],
            conf, 'test_api', RULES)


def test_openapi_document():
    doc = make_app().openapi()
    put = doc['paths']['/things/{name}']['put']
    assert put['requestBody']['content']['application/json'][
        'schema'] == BODY
    assert put['x-policy-rule'] == 'test:write'
    assert '401' in put['responses'] and '201' in put['responses']
    assert doc['components']['securitySchemes']['token']['name'] == (
        'X-Auth-Token')
