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

"""Start-up of the service: configuration, authentication middleware."""

from keystonemiddleware import auth_token
import pytest

from cyborg_nova.api import server as api_server
from cyborg_nova.cmd import conductor as conductor_cmd
from cyborg_nova.conductor import service
from cyborg_nova.conf import conductor as conductor_conf


def write(tmp_path, text):
    path = tmp_path / 'conductor.conf'
    path.write_text(text)
    return str(path)


def test_missing_config_file(tmp_path, capsys):
    assert conductor_cmd.main(['--config-file', str(tmp_path / 'nope')]) == 2
    assert 'nope' in capsys.readouterr().err


@pytest.mark.parametrize('text', [
    '[cyborg_conductor]\nagent_down_time = 0\n',
    '[cyborg_conductor]\nagent_timeout = soon\n',
    '[cyborg_conductor]\nbind_port = 70000\n',
    '[cyborg_conductor]\nauth_strategy = none\n',
])
def test_bad_values_fail_at_start(tmp_path, capsys, text):
    assert conductor_cmd.main(['--config-file', write(tmp_path, text)]) == 2
    assert capsys.readouterr().err.startswith('cyborg-nova-conductor: ')


def test_config_read(tmp_path):
    conf = conductor_cmd.parse_config(['--config-file', write(
        tmp_path, '[cyborg_conductor]\nagent_down_time = 7\n'
                  'agent_token = t\n')])
    assert conf.cyborg_conductor.agent_down_time == 7
    collector = service.make_collector(conf)
    assert collector.token == 't'
    assert collector.placement is None
    assert 'not configured' in collector.placement_problem


def test_token_auth_is_the_app_itself(tmp_path):
    conf = conductor_cmd.parse_config([])
    app = object()
    assert api_server.with_auth(conf, conductor_conf.GROUP.name, app) is app


def test_keystone_auth_wraps_in_auth_token(tmp_path):
    conf = conductor_cmd.parse_config(['--config-file', write(
        tmp_path, '[cyborg_conductor]\nauth_strategy = keystone\n')])

    def app(environ, start_response):
        raise AssertionError('not reached without a valid token')
    wrapped = api_server.with_auth(conf, conductor_conf.GROUP.name, app)
    assert isinstance(wrapped, auth_token.AuthProtocol)
