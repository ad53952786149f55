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

"""A small real HTTP server that answers ``GET /hardware`` as an agent.

It checks ``X-Auth-Token`` like an agent with token auth, can be slow
(to time out the conductor's call) or answer something broken.
"""

import http.server
import json
import threading


class FakeAgent:
    """Serves ``{"hardware": hardware}`` on 127.0.0.1 until :meth:`stop`.

    :param token: the token required (None: any, or none).
    :param delay: seconds to wait before answering.
    :param raw: bytes to answer instead of the hardware list.
    :param trickle: seconds between the bytes of the body (a slow
        network, or a hostile agent).
    :param location: answer a redirect to there.
    """

    def __init__(self, hardware=(), token=None, delay=0.0, raw=None,
                 trickle=0.0, location=None):
        self.location = location
        self.hardware = list(hardware)
        self.token = token
        self.delay = delay
        self.raw = raw
        self.trickle = trickle
        self.requests = []
        self._stopping = threading.Event()
        agent = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format, *args):
                pass

            def do_GET(self):
                agent.requests.append(
                    (self.path, self.headers.get('X-Auth-Token')))
                if self.path != '/hardware':
                    return self._answer(404, {'error': {
                        'code': 404, 'message': 'no such resource'}})
                if agent.token and self.headers.get(
                        'X-Auth-Token') != agent.token:
                    return self._answer(401, {'error': {
                        'code': 401, 'title': 'Unauthorized',
                        'message': 'authentication required: a valid '
                                   'token in X-Auth-Token'}})
                agent._stopping.wait(agent.delay)
                if agent.location:
                    self.send_response(302)
                    self.send_header('Location', agent.location)
                    self.send_header('Content-Length', '0')
                    return self.end_headers()
                if agent.raw is not None:
                    return self._answer(200, raw=agent.raw)
                self._answer(200, {'hardware': agent.hardware})

            def _answer(self, status, body=None, raw=None):
                data = raw if raw is not None else json.dumps(
                    body).encode()
                try:
                    self.send_response(status)
                    self.send_header('Content-Type', 'application/json')
                    self.send_header('Content-Length', str(len(data)))
                    self.end_headers()
                    if not agent.trickle:
                        self.wfile.write(data)
                    for i in range(len(data) if agent.trickle else 0):
                        self.wfile.write(data[i:i + 1])
                        self.wfile.flush()
                        if agent._stopping.wait(agent.trickle):
                            break
                except OSError:
                    # The conductor gave up on a slow answer.
                    pass

        self._server = http.server.ThreadingHTTPServer(('127.0.0.1', 0),
                                                       Handler)
        self.url = 'http://127.0.0.1:%d' % self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        args=(0.05,), daemon=True)
        self._thread.start()

    def stop(self):
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
