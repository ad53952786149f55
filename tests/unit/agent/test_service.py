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

"""The agent's options, its discovery thread and heartbeat backoff."""

import threading
import time

from oslo_config import cfg
import pytest
import webob

from cyborg_nova.agent import api
from cyborg_nova.agent import heartbeat
from cyborg_nova.agent import remote
from cyborg_nova.agent import service
from cyborg_nova.api import server
from cyborg_nova.cmd import agent as agent_cmd
from cyborg_nova.conf import agent as agent_conf


def test_options_and_defaults(tmp_path):
    conf_file = tmp_path / 'nova.conf'
    # nova.conf as on a compute, plus the agent's group: options of other
    # groups are ignored, [cyborg_nova] and [placement] are read.
    conf_file.write_text(
        '[DEFAULT]\ncompute_driver = cyborg_nova.LibvirtDriver\n'
        '[cyborg_nova]\nsysfs_root = /tmp/sys\nauto_ready = True\n'
        '[placement]\nauth_type = password\nauth_url = http://ks/v3\n'
        '[cyborg_agent]\nnodename = compute-7\n')
    conf = agent_cmd.load_config(['--config-file', str(conf_file)])
    opts = conf.cyborg_agent
    assert opts.nodename == 'compute-7'
    assert (opts.heartbeat_interval, opts.discovery_interval,
            opts.driver_failure_threshold, opts.driver_poll_interval) == (
        10, 60, 3, 10)
    assert opts.watch_udev is True and opts.fence is True
    assert opts.conductor_url is None and opts.bind_port is None
    assert opts.bind_host == '127.0.0.1'
    assert agent_conf.DEFAULT_PORT == 6666
    assert conf.cyborg_nova.sysfs_root == '/tmp/sys'
    assert conf.cyborg_nova.auto_ready is True
    assert conf.placement.auth_type == 'password'


def test_list_opts_has_the_api_and_agent_options():
    ((group, opts),) = agent_conf.list_opts().items()
    assert group.name == 'cyborg_agent'
    names = {o.name for o in opts}
    assert {'bind_host', 'bind_port', 'admin_token', 'reader_token',
            'nodename', 'conductor_url', 'conductor_token',
            'heartbeat_interval', 'discovery_interval',
            'driver_failure_threshold', 'driver_poll_interval',
            'watch_udev', 'fence'} <= names
    secret = {o.name for o in opts if o.secret}
    assert {'admin_token', 'reader_token', 'conductor_token'} <= secret
    for opt in opts:
        assert opt.help, opt.name


def test_conductor_url_must_be_http():
    conf = cfg.ConfigOpts()
    agent_conf.register_opts(conf)
    conf([])
    conf.set_override('conductor_url', 'http://c:6667', 'cyborg_agent')
    assert conf.cyborg_agent.conductor_url == 'http://c:6667'
    with pytest.raises(ValueError):
        conf.set_override('conductor_url', 'ftp://c', 'cyborg_agent')


def test_discovery_requests_are_coalesced():
    started = threading.Event()
    release = threading.Event()
    runs = []

    def run():
        runs.append(time.monotonic())
        started.set()
        release.wait(5)
    discovery = service.Discovery(run, interval=0)
    discovery.start()
    try:
        assert started.wait(5)
        # Many requests while a run is going: exactly one more run.
        for _ in range(50):
            discovery.request()
        release.set()
        deadline = time.monotonic() + 5
        while discovery.runs < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        assert discovery.runs == 2
    finally:
        discovery.stop()


def test_a_failing_discovery_does_not_end_the_thread():
    calls = []

    def run():
        calls.append(1)
        raise RuntimeError('boom')
    discovery = service.Discovery(run, interval=0)
    discovery.start()
    try:
        deadline = time.monotonic() + 5
        while not calls and time.monotonic() < deadline:
            time.sleep(0.01)
        discovery.request()
        while len(calls) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(calls) == 2
    finally:
        discovery.stop()


def test_heartbeat_backs_off_and_recovers():
    beat = heartbeat.Heartbeat('http://127.0.0.1:9', 't',
                               'http://127.0.0.1:6666', 'node', 10)
    assert beat.delay() == 10
    delays = []
    for failures in range(1, 6):
        beat.failures = failures
        delays.append(beat.delay())
    assert delays == [20, 40, 60, 60, 60]
    assert beat.url == 'http://127.0.0.1:9/hello'
    assert beat.body == {'status': 'READY',
                         'endpoint': 'http://127.0.0.1:6666',
                         'host': 'node'}


def test_keystone_auth_puts_auth_token_in_front(tmp_path):
    conf_file = tmp_path / 'agent.conf'
    conf_file.write_text(
        '[cyborg_agent]\nauth_strategy = keystone\n'
        '[keystone_authtoken]\nwww_authenticate_uri = http://ks:5000/v3\n')
    conf = agent_cmd.load_config(['--config-file', str(conf_file)])
    app = api.build_app(conf, lambda: [], lambda: None,
                        remote.Registry(3, 10))
    wrapped = server.with_auth(conf, agent_conf.GROUP.name, app)
    assert wrapped is not app
    # Identity headers a client forges are not believed (the bare
    # application would).

    def forged():
        request = webob.Request.blank('/hardware')
        request.headers['X-Identity-Status'] = 'Confirmed'
        request.headers['X-Roles'] = 'admin'
        return request
    assert forged().get_response(wrapped).status_int == 401
    assert forged().get_response(app).status_int == 200
    # With static tokens the application is served as it is.
    conf.set_override('auth_strategy', 'token', 'cyborg_agent')
    assert server.with_auth(conf, agent_conf.GROUP.name, app) is app
