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

"""With a certificate configured, the conductor-lite serves HTTPS only."""

import configparser
import http.client
import json
import ssl
import subprocess

import pytest

from tests.functional.conductor import conductor_fixture


@pytest.fixture
def tls_conductor(tmp_path):
    cert, key = tmp_path / 'cert.pem', tmp_path / 'key.pem'
    subprocess.run(
        ['openssl', 'req', '-x509', '-newkey', 'rsa:2048', '-nodes',
         '-keyout', str(key), '-out', str(cert), '-days', '1',
         '-subj', '/CN=127.0.0.1',
         '-addext', 'subjectAltName=IP:127.0.0.1'],
        check=True, capture_output=True)
    conductor = conductor_fixture.Conductor(tmp_path / 'c')
    parser = configparser.RawConfigParser()
    parser.read(conductor.config)
    parser.set('cyborg_conductor', 'ssl_cert_file', str(cert))
    parser.set('cyborg_conductor', 'ssl_key_file', str(key))
    with open(conductor.config, 'w') as f:
        parser.write(f)
    conductor.start()
    yield conductor, str(cert)
    conductor.stop()


def test_https_only(tls_conductor):
    conductor, cert = tls_conductor
    assert conductor.url.startswith('https://127.0.0.1:')
    port = int(conductor.url.rsplit(':', 1)[1])
    context = ssl.create_default_context(cafile=cert)
    conn = http.client.HTTPSConnection('127.0.0.1', port, context=context,
                                       timeout=10)
    conn.request('GET', '/agents',
                 headers={'X-Auth-Token': conductor_fixture.READER})
    resp = conn.getresponse()
    assert resp.status == 200
    assert json.loads(resp.read()) == {'agents': []}
    # Plain HTTP on the same port is turned away, never served.
    assert conductor_fixture.plain_http_status(
        port, '/agents', conductor_fixture.READER) != 200
