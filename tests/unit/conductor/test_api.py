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

"""The conductor-lite's API in-process: validation, auth, the document."""

import json
import shutil

from oslo_config import cfg
import pytest
import webob

from cyborg_nova.conductor import api
from cyborg_nova.conductor import db
from cyborg_nova.conductor import hardware
from cyborg_nova.conductor import registry
from cyborg_nova.conductor import schemas
from cyborg_nova.conf import conductor as conductor_conf

ADMIN = 'admin-token'
READER = 'reader-token'
HELLO = {'status': 'READY', 'endpoint': 'http://cn1.example.org:6666',
         'host': 'cn1.example.org'}


@pytest.fixture
def app(tmp_path):
    conf = cfg.ConfigOpts()
    conductor_conf.register_opts(conf)
    conf([])
    conf.set_override('connection', 'sqlite:///%s' % (
        tmp_path / 'db' / 'conductor.sqlite'), group='database')
    conf.set_override('admin_token', ADMIN, group='cyborg_conductor')
    conf.set_override('reader_token', READER, group='cyborg_conductor')
    engine = db.engine_from_conf(conf)
    reg = registry.Registry(db.AgentStore(engine), 60)
    yield api.make_app(conf, reg, hardware.Collector(None, 1.0))
    engine.dispose()


def call(app, method, path, token=ADMIN, body=None, raw=None,
         content_type='application/json'):
    request = webob.Request.blank(path, method=method)
    if token:
        request.headers['X-Auth-Token'] = token
    if body is not None or raw is not None:
        request.body = raw if raw is not None else json.dumps(body).encode()
        request.content_type = content_type
    response = request.get_response(app)
    return response.status_int, json.loads(response.text)


def test_hello_and_list(app):
    status, agent = call(app, 'POST', '/hello', body=HELLO)
    assert status == 200
    assert {k: agent[k] for k in HELLO} == HELLO
    assert agent['state'] == 'UP'
    status, body = call(app, 'GET', '/agents', token=READER)
    assert status == 200
    assert body == {'agents': [agent]}
    # No UP agent answers: nothing, and no error for the DOWN ones.
    assert call(app, 'GET', '/hardware', token=READER)[0] == 200


@pytest.mark.parametrize('endpoint, stored', [
    ('http://cn1:6666', 'http://cn1:6666'),
    ('https://10.0.0.5:6666/', 'https://10.0.0.5:6666'),
    ('http://[fd00::5]:80', 'http://[fd00::5]:80'),
    ('https://cn1.example.org/cyborg/agent',
     'https://cn1.example.org/cyborg/agent'),
    ('http://cn1', 'http://cn1'),
    # The spec's bare host:port, normalised before it is stored.
    ('cn1:6666', 'http://cn1:6666'),
    ('compute-whatever:1337', 'http://compute-whatever:1337'),
    ('[fd00::5]:6666', 'http://[fd00::5]:6666'),
    ('cn1', 'http://cn1')])
def test_good_endpoints(app, endpoint, stored):
    assert api.endpoint_problem(endpoint) is None
    status, agent = call(app, 'POST', '/hello', body=dict(
        HELLO, endpoint=endpoint))
    assert status == 200
    assert agent['endpoint'] == stored


@pytest.mark.parametrize('endpoint, message', [
    ('ftp://cn1/', 'the scheme must be http or https'),
    ('http://', 'it has no host'),
    ('http:///path', 'it has no host'),
    ('http://user:pw@cn1/', 'credentials are not allowed'),
    ('http://cn1/?q=1', 'does not match'),
    ('http://cn1 /', 'does not match'),
    ('http://cn1:99999', 'a number from 1 to 65535'),
    ('cn1:99999', 'a number from 1 to 65535'),
    ('http://cn1:0', 'a number from 1 to 65535'),
    ('http://cn1:x', 'a number from 1 to 65535'),
    ('cn1:', 'a number from 1 to 65535'),
    ('cn_1:80', 'neither a host name nor an IPv4 address'),
    ('fd00::5:80', 'an IPv6 address must be in brackets'),
    ('http://cn1:6666\n', 'whitespace or control characters'),
    ('http://[fd00::5:80', 'Invalid IPv6 URL'),
])
def test_bad_endpoints(app, endpoint, message):
    status, body = call(app, 'POST', '/hello',
                        body=dict(HELLO, endpoint=endpoint))
    assert status == 400
    assert message in body['error']['message']
    assert 'endpoint' in body['error']['message']


@pytest.mark.parametrize('endpoint, host', [
    ('compute-whatever:1337', 'compute-whatever'),
    ('https://cn2.example.org:6666/agent', 'cn2.example.org'),
    ('10.0.0.9:6666', '10.0.0.9')])
def test_host_from_endpoint(app, endpoint, host):
    status, agent = call(app, 'POST', '/hello', body={
        'status': 'READY', 'endpoint': endpoint})
    assert status == 200, agent
    assert agent['host'] == host


def test_no_host_from_ipv6_endpoint(app):
    status, body = call(app, 'POST', '/hello', body={
        'status': 'READY', 'endpoint': '[fd00::5]:6666'})
    assert status == 400
    assert "host is missing and the endpoint's host 'fd00::5' is not a " \
        "host name to take instead; send host" == body['error']['message']


@pytest.mark.parametrize('change, message', [
    ({'host': ''}, 'host'),
    ({'host': 'a' * 256}, 'host'),
    ({'host': 'cn1 '}, 'host'),
    ({'host': 'cn1\n'}, "host 'cn1\\n' is not a host name"),
    ({'host': '-cn1'}, 'host'),
    ({'host': 'cn/1'}, 'host'),
    ({'host': 7}, "7 is not of type 'string'"),
    ({'status': 'ready'}, 'status'),
    ({'status': 'READY\n'}, 'is not an upper-case word'),
    ({'status': None}, "None is not of type 'string'"),
    ({'extra': 1}, "('extra' was unexpected)"),
    ({'endpoint': ['http://cn1']}, "is not of type 'string'"),
])
def test_bad_hello_fields(app, change, message):
    status, body = call(app, 'POST', '/hello', body=dict(HELLO, **change))
    assert status == 400
    assert message in body['error']['message']


def test_missing_fields(app):
    # host is optional: the endpoint's host is taken (see above).
    for field in ('status', 'endpoint'):
        body = dict(HELLO)
        del body[field]
        status, error = call(app, 'POST', '/hello', body=body)
        assert status == 400
        assert "'%s' is a required property" % field in error[
            'error']['message']


def test_longest_host(app):
    assert call(app, 'POST', '/hello', body=dict(
        HELLO, host='a' * 255))[0] == 200


@pytest.mark.parametrize('kwargs, code', [
    ({'token': None}, 401),
    ({'token': 'nope'}, 401),
    ({'token': READER}, 403),
    ({'raw': b'{"status": '}, 400),
    ({'raw': b'[]'}, 400),
    ({'raw': b'x' * 70000}, 413),
    ({'body': HELLO, 'content_type': 'text/plain'}, 415),
])
def test_bad_requests(app, kwargs, code):
    kwargs.setdefault('body', None if 'raw' in kwargs else HELLO)
    status, body = call(app, 'POST', '/hello', **kwargs)
    assert status == code
    assert body['error']['code'] == code and body['error']['message']


def test_openapi_document_complete(app):
    status, doc = call(app, 'GET', '/openapi.json', token=READER)
    assert status == 200
    operations = {(method.upper(), path): op
                  for path, ops in doc['paths'].items()
                  for method, op in ops.items()}
    assert set(operations) == {('POST', '/hello'), ('GET', '/agents'),
                               ('GET', '/hardware'),
                               ('GET', '/drivers'),
                               ('POST', '/services'),
                               ('POST', '/programs'),
                               ('GET', '/programs/{id}'),
                               ('GET', '/openapi.json')}
    for (method, path), op in operations.items():
        assert op['x-policy-rule'].startswith('cyborg_nova:conductor:')
        ok = [c for c in op['responses'] if c.startswith('2')]
        assert len(ok) == 1, (method, path)
        assert 'schema' in op['responses'][ok[0]]['content'][
            'application/json'], (method, path)
        for code in ('400', '401', '403'):
            assert code in op['responses']
    assert operations['POST', '/hello']['requestBody']['content'][
        'application/json']['schema'] == schemas.HELLO_BODY


def test_every_operation_needs_a_token(app):
    for path, ops in app.openapi()['paths'].items():
        for method in ops:
            status, body = call(app, method.upper(), path, token=None,
                                body=HELLO if method == 'post' else None)
            assert status == 401, (method, path)


def test_database_gone_is_503(app, tmp_path):
    shutil.rmtree(tmp_path / 'db')
    for method, path, body in (('GET', '/agents', None),
                               ('POST', '/hello', HELLO),
                               ('GET', '/hardware', None)):
        status, error = call(app, method, path, body=body)
        assert status == 503, (method, path)
        assert error['error']['message'] == (
            'the database is unavailable; retry later')
