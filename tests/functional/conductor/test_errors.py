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

"""Every bad request gets a 4xx with a JSON reason, over real HTTP."""

import pytest

from tests.functional.conductor import conductor_fixture as cf

HELLO = {'status': 'READY', 'endpoint': 'http://cn1:6666', 'host': 'cn1'}


@pytest.fixture(scope='module')
def conductor(tmp_path_factory):
    conductor = cf.Conductor(tmp_path_factory.mktemp('conductor')).start()
    yield conductor
    assert conductor.stop() == 0
    # Client mistakes are not the service's: nothing went wrong inside.
    assert 'ERROR' not in conductor.log()


@pytest.mark.parametrize('kwargs, code, message', [
    ({'raw': b'{"status": "READY",'}, 400, 'not valid JSON'),
    ({'raw': b'\xff\xfe{}'}, 400, 'not valid JSON'),
    ({'raw': b'"READY"'}, 400, "is not of type 'object'"),
    ({'body': dict(HELLO, status=1)}, 400,
     "at status: 1 is not of type 'string'"),
    ({'body': dict(HELLO, host=['cn1'])}, 400,
     "at host: ['cn1'] is not of type 'string'"),
    ({'body': dict(HELLO, endpoint=None)}, 400,
     "at endpoint: None is not of type 'string'"),
    ({'body': dict(HELLO, type='CRYPTO')}, 400,
     "Additional properties are not allowed ('type' was unexpected)"),
    ({'body': {'status': 'READY', 'endpoint': 'http://[fd00::1]:1'}},
     400, "host is missing and the endpoint's host 'fd00::1' is not a "
     "host name"),
    ({'body': {'status': 'READY'}}, 400,
     "'endpoint' is a required property"),
    ({'body': dict(HELLO, endpoint='compute_whatever:1337')}, 400,
     "'compute_whatever' is neither a host name nor an IPv4 address"),
    ({'body': dict(HELLO, endpoint='not a url')}, 400,
     "at endpoint: 'not a url' does not match"),
    ({'body': dict(HELLO, endpoint='http://cn1:70000')}, 400,
     "endpoint 'http://cn1:70000' is not the http(s) URL of an agent "
     "API: the port must be a number from 1 to 65535, not '70000'"),
    ({'body': dict(HELLO, host='x' * 256)}, 400, 'is too long'),
    ({'body': dict(HELLO, host='cn1;rm')}, 400, 'at host'),
    ({'raw': b'{"host": "' + b'x' * 70000 + b'"}'}, 413,
     'larger than the 65536 allowed'),
    ({'body': HELLO, 'content_type': 'text/plain'}, 415,
     'must be application/json'),
    ({'body': None}, 400, 'a JSON request body is required'),
    ({'body': HELLO, 'token': None}, 401, 'authentication required'),
    ({'body': HELLO, 'token': 'wrong'}, 401, 'authentication required'),
    ({'body': HELLO, 'token': cf.READER}, 403,
     'policy does not allow POST /hello'),
])
def test_bad_hello(conductor, kwargs, code, message):
    status, body, headers = conductor.call('POST', '/hello', **kwargs)
    assert status == code, body
    assert headers['Content-Type'].startswith('application/json')
    assert body['error']['code'] == code
    assert message in body['error']['message'], body['error']['message']
    if code == 401:
        assert headers['WWW-Authenticate'] == 'X-Auth-Token'
    # Nothing was registered by any of them.
    assert conductor.call('GET', '/agents')[1] == {
        'agents': []}


@pytest.mark.parametrize('method, path, kwargs, code', [
    ('GET', '/agents', {'token': None}, 401),
    ('GET', '/agents', {'token': 'wrong'}, 401),
    ('GET', '/hardware', {'token': None}, 401),
    ('GET', '/openapi.json', {'token': None}, 401),
    ('GET', '/nothing', {}, 404),
    ('DELETE', '/agents', {}, 405),
    ('GET', '/hello', {}, 405),
    ('GET', '/agents', {'body': {'x': 1}}, 400),
])
def test_other_errors(conductor, method, path, kwargs, code):
    status, body, _ = conductor.call(method, path, **kwargs)
    assert status == code
    assert body['error']['code'] == code and body['error']['message']
