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

"""cyborg-nova-driver's service: its API, its hello, its user errors."""

import json

from oslo_config import cfg
import pytest
import webob

from cyborg_drivers.fake import hosttree
from cyborg_nova.cmd import driver as driver_cmd
from cyborg_nova import conf as cn_conf
from cyborg_nova.remote_driver import service
from cyborg_nova import service_client


@pytest.fixture(scope='module')
def tree(tmp_path_factory):
    root = str(tmp_path_factory.mktemp('driver') / 'sys')
    hosttree.build_tree('crypto-nic-host', root)
    return root


def settings(tree, **kwargs):
    return service.Settings(**dict(dict(
        driver='intel_qat', agent_url='127.0.0.1:1', agent_token='t',
        nodename='cn1', sysfs_root=tree), **kwargs))


def new_service(tree, **kwargs):
    conf = cfg.ConfigOpts()
    conf([])
    cn_conf.register_opts(conf)
    return service.DriverService(conf, settings(tree, **kwargs))


def call(app, method, path):
    resp = webob.Request.blank(path, method=method).get_response(app)
    return resp.status_int, json.loads(resp.text)


def test_the_api_serves_the_devices_without_a_token(tree):
    driver = new_service(tree)
    assert call(driver.app, 'GET', '/hardware') == (200, {'hardware': []})
    driver.discover()
    status, body = call(driver.app, 'GET', '/hardware')
    assert status == 200
    assert [e['pci']['address'] for e in body['hardware']] == [
        '0000:6b:00.0', '0000:70:00.0', '0000:e8:00.0']
    entry = body['hardware'][0]
    assert entry['placement']['resource_class'] == 'CUSTOM_QAT'
    assert entry['placement']['units'][0] == '0000:6b:00.1'
    assert entry['acc_specs']['device_type'] == 'CRYPTO'
    assert driver.device_type() == 'CRYPTO'
    assert call(driver.app, 'POST', '/discovery') == (
        202, {'status': 'IN-PROGRESS'})
    status, document = call(driver.app, 'GET', '/openapi.json')
    assert document['paths']['/hardware']['get']['security'] == []
    assert call(driver.app, 'GET', '/drivers')[0] == 404


def test_hello_says_what_went_wrong(tree):
    driver = new_service(tree, hello_interval=3600)
    driver.start()
    try:
        assert driver.server.url.startswith('http://127.0.0.1:')
        with pytest.raises(service_client.ServiceError,
                           match='agent http://127.0.0.1:1 '
                           'unreachable'):
            driver.hello()
    finally:
        driver.stop()


@pytest.mark.parametrize('kwargs, message', [
    ({'bind_host': '0.0.0.0'}, 'loopback only'),  # nosec B104
    ({'agent_url': 'ftp://agent'}, 'scheme must be http'),
    ({'driver': 'nope'}, 'unknown driver'),
])
def test_refused_settings(tree, kwargs, message):
    with pytest.raises(Exception, match=message):
        new_service(tree, **kwargs)


def test_the_command_needs_a_token(monkeypatch, capsys):
    monkeypatch.delenv(driver_cmd.TOKEN_ENV, raising=False)
    assert driver_cmd.main(['--driver', 'intel_qat', '--agent-url',
                            'http://127.0.0.1:6666']) == 2
    assert 'agent\'s token is needed' in capsys.readouterr().err


def test_the_command_reports_a_bad_driver_without_a_traceback(
        tmp_path, capsys):
    assert driver_cmd.main(['--driver', 'nope', '--agent-url',
                            'http://127.0.0.1:6666', '--agent-token', 't',
                            '--sysfs-root', str(tmp_path)]) == 1
    assert 'Traceback' not in capsys.readouterr().err
