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

"""The internal APIs' security, with real agent and conductor processes.

- No token ever reaches a log, at DEBUG: not the tokens clients send
  (right or wrong), not the one the agent's heartbeat sends the
  conductor, not the one the conductor sends agents.
- Neither service listens beyond loopback without authentication.
- With TLS and certificates of a test CA, the conductor reaches the
  agent over HTTPS and verifies it; clients that do not trust the CA, or
  speak plain HTTP, are refused.
"""

import configparser
import http.client
import os
import ssl
import subprocess
import sys
import time

import pytest
import requests

from cyborg_drivers.fake import hosttree
from tests.functional.agent import base
from tests.functional.conductor import conductor_fixture as cf

WRONG = 'wrong-token-3f9c1a7e'


def configure(path, changes):
    """Set options of an ini file: ``{section: {option: value}}``."""
    parser = configparser.RawConfigParser()
    parser.read(path)
    for section, options in changes.items():
        if section != 'DEFAULT' and not parser.has_section(section):
            parser.add_section(section)
        for option, value in options.items():
            if value is None:
                parser.remove_option(section, option)
            else:
                parser.set(section, option, value)
    with open(path, 'w') as f:
        parser.write(f)


@pytest.fixture
def tree(tmp_path):
    root = str(tmp_path / 'sys')
    hosttree.build_tree('fpga-host', root)
    return root


def agent_sections(tmp_path, tree, **agent):
    return {'cyborg_nova': {'sysfs_root': tree,
                            'state_path': str(tmp_path / 'state.sqlite')},
            'cyborg_agent': agent}


def wait_for(predicate, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_no_token_is_ever_logged(tmp_path, tree):
    conductor = cf.Conductor(tmp_path / 'conductor')
    configure(conductor.config, {'DEFAULT': {'debug': 'True'}})
    conductor.start()
    agent = base.AgentProcess(str(tmp_path), agent_sections(
        tmp_path, tree,
        # The conductor's agent_token is the agent's reader token.
        reader_token=cf.AGENT_TOKEN,
        conductor_url=conductor.url, conductor_token=cf.ADMIN,
        heartbeat_interval='1'))
    agent.setUp()
    try:
        # The heartbeat registered the agent with the conductor's token.
        assert wait_for(lambda: conductor.call(
            'GET', '/agents', token=cf.READER)[1]['agents'])
        # The conductor asks the agent for its hardware with its token.
        status, answer, _ = conductor.call('GET', '/hardware')
        assert status == 200 and answer['hardware'], answer
        for token in (base.ADMIN, WRONG, None):
            agent.call('GET', '/hardware', token=token)
            agent.call('POST', '/discovery', token=token)
            conductor.call('GET', '/agents', token=token or WRONG)
        assert agent.call('GET', '/drivers', token=base.ADMIN).ok
        status, _, _ = conductor.call('POST', '/hello', token=WRONG, body={
            'host': 'h', 'status': 'READY', 'endpoint': 'http://h:1'})
        assert status == 401
    finally:
        agent.cleanUp()
        assert conductor.stop() == 0
    logs = {'agent': agent.log(), 'conductor': conductor.log()}
    for name, text in logs.items():
        # DEBUG was on, and the requests are in the log.
        assert ' DEBUG ' in text, name
        for token in (base.ADMIN, cf.ADMIN, cf.READER, cf.AGENT_TOKEN,
                      WRONG):
            assert token not in text, (name, token)
    assert 'GET /hardware' in logs['conductor'] or \
        '/hardware' in logs['agent']


def _start(command, config):
    return subprocess.run(
        [sys.executable, '-m', command, '--config-file', config],
        capture_output=True, text=True, timeout=60, env=base.env(),
        cwd=base.REPO_ROOT)


@pytest.mark.parametrize('host', ['0.0.0.0', '::', 'compute1.example.org'])
def test_conductor_refuses_to_listen_beyond_loopback_without_auth(
        tmp_path, host):
    conductor = cf.Conductor(tmp_path)
    configure(conductor.config, {'cyborg_conductor': {
        'bind_host': host, 'admin_token': None, 'reader_token': None}})
    proc = _start('cyborg_nova.cmd.conductor', conductor.config)
    assert proc.returncode == 1
    assert 'listening' not in proc.stdout
    assert 'refusing to listen on %s' % host in conductor.log()


def test_agent_refuses_to_listen_beyond_loopback_without_auth(tmp_path,
                                                              tree):
    sections = agent_sections(tmp_path, tree, bind_host='0.0.0.0')
    agent = base.AgentProcess(str(tmp_path), sections)
    configure(agent.config, {'cyborg_agent': {'admin_token': None,
                                              'reader_token': None}})
    proc = _start('cyborg_nova.cmd.agent', agent.config)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert 'listening' not in proc.stdout
    assert 'refusing to listen on 0.0.0.0' in proc.stderr


def test_loopback_without_auth_and_beyond_with_auth_are_served(tmp_path):
    # Loopback without tokens: served (and every request is a 401).
    conductor = cf.Conductor(tmp_path / 'loopback')
    configure(conductor.config, {'cyborg_conductor': {
        'admin_token': None, 'reader_token': None}})
    conductor.start()
    try:
        assert conductor.call('GET', '/agents', token=cf.ADMIN)[0] == 401
    finally:
        assert conductor.stop() == 0
    # Every address, with a token: served.
    conductor = cf.Conductor(tmp_path / 'wildcard')
    configure(conductor.config, {'cyborg_conductor': {
        'bind_host': '0.0.0.0', 'reader_token': None}})
    conductor.start()
    try:
        port = int(conductor.url.rsplit(':', 1)[1])
        resp = requests.get('http://127.0.0.1:%d/agents' % port,
                            headers={'X-Auth-Token': cf.ADMIN}, timeout=10)
        assert resp.status_code == 200
    finally:
        assert conductor.stop() == 0


# -- TLS with a test CA ----------------------------------------------------

def _openssl(*args, cwd):
    subprocess.run(['openssl', *args], cwd=cwd, check=True,
                   capture_output=True)


@pytest.fixture
def ca(tmp_path):
    """A test CA and a certificate it signed for 127.0.0.1."""
    d = str(tmp_path / 'ca')
    os.makedirs(d)
    _openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1',
             '-keyout', 'ca.key', '-out', 'ca.pem', '-subj',
             '/CN=cyborg-nova test CA', cwd=d)
    _openssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'host.key',
             '-out', 'host.csr', '-subj', '/CN=127.0.0.1', cwd=d)
    with open(os.path.join(d, 'ext.cnf'), 'w') as f:
        f.write('subjectAltName=IP:127.0.0.1\n')
    _openssl('x509', '-req', '-in', 'host.csr', '-CA', 'ca.pem', '-CAkey',
             'ca.key', '-CAcreateserial', '-days', '1', '-out', 'host.pem',
             '-extfile', 'ext.cnf', cwd=d)
    return {name: os.path.join(d, name)
            for name in ('ca.pem', 'host.pem', 'host.key')}


def test_tls_with_a_test_ca(tmp_path, tree, ca):
    agent = base.AgentProcess(str(tmp_path), agent_sections(
        tmp_path, tree, reader_token=cf.AGENT_TOKEN,
        ssl_cert_file=ca['host.pem'], ssl_key_file=ca['host.key']))
    agent.setUp()
    conductor = cf.Conductor(tmp_path / 'conductor')
    configure(conductor.config, {'cyborg_conductor': {
        'ssl_cert_file': ca['host.pem'], 'ssl_key_file': ca['host.key'],
        'agent_ca_file': ca['ca.pem']}})
    try:
        assert agent.url.startswith('https://127.0.0.1:')
        # A client that trusts the CA: served.
        resp = requests.get(agent.url + '/hardware', verify=ca['ca.pem'],
                            headers={'X-Auth-Token': base.ADMIN}, timeout=10)
        assert resp.status_code == 200
        # One that does not: the handshake fails.
        with pytest.raises(requests.exceptions.SSLError):
            requests.get(agent.url + '/hardware', timeout=10,
                         headers={'X-Auth-Token': base.ADMIN})
        # Plain HTTP on the HTTPS port is never served.
        port = int(agent.url.rsplit(':', 1)[1])
        assert cf.plain_http_status(port, '/hardware', base.ADMIN) != 200

        # The conductor, itself on HTTPS, reaches the agent over HTTPS
        # and verifies it with the CA.
        conductor.start()
        assert conductor.url.startswith('https://')
        context = ssl.create_default_context(cafile=ca['ca.pem'])
        cport = int(conductor.url.rsplit(':', 1)[1])

        def call(method, path, body=None):
            conn = http.client.HTTPSConnection('127.0.0.1', cport,
                                               context=context, timeout=30)
            headers = {'X-Auth-Token': cf.ADMIN}
            if body is not None:
                headers['Content-Type'] = 'application/json'
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        status, _ = call('POST', '/hello', (
            '{"host": "%s", "status": "READY", "endpoint": "%s"}'
            % (base.NODENAME, agent.url)))
        assert status == 200
        status, body = call('GET', '/hardware')
        assert status == 200
        assert b'"0000:' in body, body[:500]
    finally:
        conductor.stop()
        agent.cleanUp()
