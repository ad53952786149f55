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

"""Keystone tokens against both APIs, through the real auth_token.

keystonemiddleware's ``auth_token`` stands in front of each application
as in production (``server.with_auth``); its own test fixture answers
the token validation Keystone would do. Every route of each API is
called with a token of each role: a valid token without a role the
policy names (a plain project ``member``) is a 403 everywhere, a
``reader`` token a 403 on every route that changes something, and no
token or an unknown one a 401. Nothing logged, at DEBUG, holds a token.
"""

import json
import logging

from keystonemiddleware import fixture as ks_fixture
from oslo_config import cfg
import pytest
import webob

from cyborg_nova.agent import api as agent_api
from cyborg_nova.agent import remote
from cyborg_nova.api import server
from cyborg_nova.conductor import api as conductor_api
from cyborg_nova.conductor import db
from cyborg_nova.conductor import hardware
from cyborg_nova.conductor import registry
from cyborg_nova.conf import agent as agent_conf
from cyborg_nova.conf import conductor as conductor_conf
from cyborg_nova import policies

ROLES = {'member': ['member'], 'reader': ['reader'], 'admin': ['admin'],
         'service': ['service']}


@pytest.fixture
def tokens():
    fixture = ks_fixture.AuthTokenFixture()
    fixture.setUp()
    ids = {}
    for name, roles in ROLES.items():
        ids[name] = 'keystone-token-%s' % name
        fixture.add_token_data(token_id=ids[name], role_list=roles,
                               project_id='p', user_id='u')
    yield ids
    fixture.cleanUp()


def keystone_conf(register, group, tmp_path):
    path = tmp_path / ('%s.conf' % group)
    path.write_text('[%s]\nauth_strategy = keystone\n[keystone_authtoken]\n'
                    'www_authenticate_uri = http://keystone:5000/v3\n'
                    % group)
    conf = cfg.ConfigOpts()
    register(conf)
    conf(['--config-file', str(path)])
    return conf


@pytest.fixture
def agent(tmp_path):
    conf = keystone_conf(agent_conf.register_opts, 'cyborg_agent',
                         tmp_path)
    app = agent_api.build_app(conf, lambda: [], lambda: None,
                              remote.Registry(3, 10))
    return app, server.with_auth(conf, 'cyborg_agent', app)


@pytest.fixture
def conductor(tmp_path):
    conf = keystone_conf(conductor_conf.register_opts, 'cyborg_conductor',
                         tmp_path)
    conf.set_override('connection', 'sqlite:///%s' % (
        tmp_path / 'db' / 'conductor.sqlite'), group='database')
    engine = db.engine_from_conf(conf)
    app = conductor_api.make_app(conf, registry.Registry(
        db.AgentStore(engine), 60), hardware.Collector(None, 1.0))
    yield app, server.with_auth(conf, 'cyborg_conductor', app)
    engine.dispose()


def call(app, route, token):
    path = route.path.replace('{job}', '0' * 8 + '-0000-0000-0000-' +
                              '0' * 12).replace('{id}', 'x')
    request = webob.Request.blank(path, method=route.method)
    if token:
        request.headers['X-Auth-Token'] = token
    if route.body is not None:
        request.body = json.dumps({}).encode()
        request.content_type = 'application/json'
    return request.get_response(app).status_int


def allowed(rule, role):
    check = {r.name: r.check_str for r in policies.list_rules()}[rule]
    return 'role:%s' % role in check


@pytest.mark.parametrize('which', ['agent', 'conductor'])
def test_roles_of_keystone_tokens(request, tokens, which, caplog):
    # Everything logged at DEBUG, to show no token is.
    caplog.set_level(logging.DEBUG)
    app, wrapped = request.getfixturevalue(which)
    assert wrapped is not app
    seen = {}
    for route in app.routes:
        for role, token in tokens.items():
            status = call(wrapped, route, token)
            seen[(route.method, route.path, role)] = status
            if allowed(route.rule, role):
                assert status not in (401, 403), (route.path, role, status)
            else:
                assert status == 403, (route.path, role, status)
        assert call(wrapped, route, 'not-a-keystone-token') == 401
        assert call(wrapped, route, None) == 401
    # A plain project member gets nowhere; the admin everywhere.
    assert {s for (_, _, r), s in seen.items() if r == 'member'} == {403}
    assert 403 not in {s for (_, _, r), s in seen.items() if r == 'admin'}
    # Some routes only admin may use.
    assert [k for k, s in seen.items() if k[2] == 'reader' and s == 403]
    assert any(r.name.startswith('keystonemiddleware')
               for r in caplog.records)
    for token in list(tokens.values()) + ['not-a-keystone-token']:
        assert token not in caplog.text


def test_exposure_needs_authentication():
    conf = cfg.ConfigOpts()
    agent_conf.register_opts(conf)
    conf([])
    opts = conf.cyborg_agent
    for host in ('127.0.0.1', '127.1.2.3', '::1', 'localhost'):
        conf.set_override('bind_host', host, 'cyborg_agent')
        server.check_exposure(opts)
    for host in ('0.0.0.0', '::', '192.0.2.10', 'compute1'):
        conf.set_override('bind_host', host, 'cyborg_agent')
        with pytest.raises(ValueError, match='refusing to listen on'):
            server.check_exposure(opts)
        conf.set_override('reader_token', 'r', 'cyborg_agent')
        server.check_exposure(opts)
        conf.clear_override('reader_token', 'cyborg_agent')
        conf.set_override('auth_strategy', 'keystone', 'cyborg_agent')
        server.check_exposure(opts)
        conf.clear_override('auth_strategy', 'cyborg_agent')
