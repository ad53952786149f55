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

"""The client of calls between services, against real WSGI servers.

Each server is wsgiref on loopback in a thread, answering what the test
asks; the client's failures all come out as one ``ServiceError``.
"""

import json
import socketserver
import ssl
import subprocess
import threading
import time
import wsgiref.simple_server

import pytest

from cyborg_nova import service_client


class _Quiet(wsgiref.simple_server.WSGIRequestHandler):
    def log_message(self, format, *args):
        pass


class _Threading(socketserver.ThreadingMixIn,
                 wsgiref.simple_server.WSGIServer):
    daemon_threads = True


class Server:
    """A WSGI server on loopback; ``answer(environ)`` says what it sends.

    ``answer`` returns (status line, headers, body chunks); ``seen``
    keeps (method, path, token, JSON body) of each request.
    """

    def __init__(self, answer, context=None):
        self.seen = []
        self.answer = answer

        def app(environ, start_response):
            length = int(environ.get('CONTENT_LENGTH') or 0)
            raw = environ['wsgi.input'].read(length) if length else b''
            self.seen.append((environ['REQUEST_METHOD'],
                              environ['PATH_INFO'],
                              environ.get('HTTP_X_AUTH_TOKEN'),
                              json.loads(raw) if raw else None))
            status, headers, chunks = self.answer(environ)
            start_response(status, headers)
            return chunks
        self._server = wsgiref.simple_server.make_server(
            '127.0.0.1', 0, app, server_class=_Threading,
            handler_class=_Quiet)
        scheme = 'http'
        if context is not None:
            self._server.socket = context.wrap_socket(
                self._server.socket, server_side=True)
            scheme = 'https'
        self.url = '%s://127.0.0.1:%d' % (scheme,
                                          self._server.server_port)
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def stop(self):
        self._server.shutdown()
        self._server.server_close()


def json_answer(status, body):
    data = json.dumps(body).encode()
    return (status, [('Content-Type', 'application/json'),
                     ('Content-Length', str(len(data)))], [data])


@pytest.fixture
def serve():
    servers = []

    def start(answer, context=None):
        server = Server(answer, context)
        servers.append(server)
        return server
    yield start
    for server in servers:
        server.stop()


def client(server, **kwargs):
    kwargs.setdefault('timeout', 1.0)
    return service_client.Client(server.url + '/', 'agent cn1', **kwargs)


def test_token_and_json_sent_json_answered(serve):
    server = serve(lambda environ: json_answer('202 Accepted',
                                               {'status': 'IN-PROGRESS'}))
    status, answer = client(server, token='s3cret').request(
        'POST', '/program', {'device': '0000:5e:00.0'})
    assert (status, answer) == (202, {'status': 'IN-PROGRESS'})
    assert server.seen == [('POST', '/program', 's3cret',
                            {'device': '0000:5e:00.0'})]


def test_no_token_no_header(serve):
    server = serve(lambda environ: json_answer('200 OK', {'hardware': []}))
    assert client(server, token=None).get('/hardware') == {'hardware': []}
    assert client(server, token='').get('/hardware') == {'hardware': []}
    assert [token for _, _, token, _ in server.seen] == [None, None]


def test_an_empty_answer_is_none(serve):
    server = serve(lambda environ: ('204 No Content', [], []))
    assert client(server).request('POST', '/discovery') == (204, None)


def slow(environ):
    time.sleep(2)
    return json_answer('200 OK', {})


def trickled(environ):
    def chunks():
        for byte in b'{"hardware": []}' * 10:
            time.sleep(0.1)
            yield bytes([byte])
    return '200 OK', [('Content-Type', 'application/json')], chunks()


@pytest.mark.parametrize('answer', [slow, trickled],
                         ids=['no answer', 'trickled answer'])
def test_timeout_is_a_service_error(serve, answer):
    server = serve(answer)
    start = time.monotonic()
    with pytest.raises(service_client.ServiceError) as error:
        client(server, timeout=0.5).get('/hardware')
    # One timeout for the answer, plus at most one read.
    assert time.monotonic() - start < 1.5
    assert error.value.status is None
    assert str(error.value).startswith(
        'agent cn1: GET %s/hardware failed: no answer within 0.5 s; '
        % server.url)


def test_a_redirect_is_not_followed(serve):
    elsewhere = serve(lambda environ: json_answer('200 OK', {}))
    server = serve(lambda environ: (
        '302 Found', [('Location', elsewhere.url + '/hardware'),
                      ('Content-Length', '0')], []))
    with pytest.raises(service_client.ServiceError) as error:
        client(server, token='s3cret').get('/hardware')
    assert error.value.status == 302
    assert error.value.url == server.url + '/hardware'
    assert 'answered 302: a redirect to %s/hardware' % elsewhere.url in str(
        error.value)
    assert 'a redirect is not followed' in str(error.value)
    # The token did not travel there.
    assert elsewhere.seen == []


@pytest.mark.parametrize('status, body, detail, hint', [
    ('401 Unauthorized', {'error': {'code': 401, 'message':
                                    'authentication required'}},
     'authentication required', 'check the token'),
    ('409 Conflict', {'error': {'code': 409, 'message': 'busy'}},
     'busy', None),
    ('500 Internal Server Error', 'boom', '"boom"', 'see its log'),
])
def test_an_error_status_is_a_service_error(serve, status, body, detail,
                                            hint):
    server = serve(lambda environ: json_answer(status, body))
    with pytest.raises(service_client.ServiceError) as error:
        client(server).request('POST', '/program', {})
    code = int(status.split()[0])
    assert (error.value.status, error.value.detail) == (code, detail)
    message = str(error.value)
    assert message.startswith('agent cn1: POST %s/program answered %d: %s'
                              % (server.url, code, detail))
    assert (hint in message) if hint else message.endswith(detail)


@pytest.mark.parametrize('raw', [b'<html>', b'\xff\xfe'])
def test_an_answer_not_json_is_a_service_error(serve, raw):
    server = serve(lambda environ: ('200 OK', [], [raw]))
    with pytest.raises(service_client.ServiceError) as error:
        client(server).get('/hardware')
    assert error.value.status is None
    assert 'GET %s/hardware did not answer JSON' % server.url in str(
        error.value)


def test_an_answer_too_large_is_a_service_error(serve):
    server = serve(lambda environ: json_answer('200 OK', ['x' * 2000]))
    with pytest.raises(service_client.ServiceError,
                       match='answered more than 1000 bytes'):
        client(server).get('/hardware', max_response=1000)


def test_unreachable_is_a_service_error():
    probe = service_client.Client('http://127.0.0.1:9', 'conductor-lite',
                                  timeout=1.0)
    with pytest.raises(service_client.ServiceError) as error:
        probe.post('/hello', {'status': 'READY'})
    assert error.value.status is None
    assert str(error.value) == (
        'conductor-lite unreachable: POST http://127.0.0.1:9/hello failed: '
        '[Errno 111] Connection refused; check that it runs and that its '
        'URL is right')


@pytest.fixture(scope='module')
def certificate(tmp_path_factory):
    where = tmp_path_factory.mktemp('tls')
    cert, key = where / 'cert.pem', where / 'key.pem'
    subprocess.run(
        ['openssl', 'req', '-x509', '-newkey', 'ec', '-pkeyopt',
         'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', str(key),
         '-out', str(cert), '-days', '1', '-subj', '/CN=127.0.0.1',
         '-addext', 'subjectAltName=IP:127.0.0.1'],
        check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    return str(cert), context


def test_the_ca_file_is_what_is_trusted(serve, certificate):
    ca_file, context = certificate
    server = serve(lambda environ: json_answer('200 OK', {'ok': True}),
                   context)
    trusting = client(server, ca_file=ca_file)
    assert trusting.session.verify == ca_file
    assert trusting.get('/hardware') == {'ok': True}
    # Without it, the self-signed certificate is refused.
    with pytest.raises(service_client.ServiceError) as error:
        client(server).get('/hardware')
    assert 'CERTIFICATE_VERIFY_FAILED' in str(error.value)
    assert 'check its certificate and the CA file' in str(error.value)
    assert len(server.seen) == 1


def test_an_unreadable_ca_file_fails_at_once(tmp_path):
    with pytest.raises(FileNotFoundError):
        service_client.Client('https://127.0.0.1:9', 'agent cn1',
                              ca_file=str(tmp_path / 'missing.pem'))
    empty = tmp_path / 'empty.pem'
    empty.write_text('')
    with pytest.raises(ssl.SSLError):
        service_client.check_ca_file(str(empty))
