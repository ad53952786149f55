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
(to time out the conductor's call) or answer something broken. It also
takes programming jobs (``POST /program``, ``GET /program/{id}``) as an
agent does: a job id posted again is the same job.
"""

import http.server
import json
import threading
import time


class FakeAgent:
    """Serves ``{"hardware": hardware}`` on 127.0.0.1 until :meth:`stop`.

    :param token: the token required (None: any, or none).
    :param delay: seconds to wait before answering.
    :param raw: bytes to answer instead of the hardware list.
    :param trickle: seconds between the bytes of the body (a slow
        network, or a hostile agent).
    :param location: answer a redirect to there.
    :param program_time: how long a programming job runs, in seconds.
    :param program_delay: seconds before answering ``POST /program``
        (the job is taken before).
    """

    def __init__(self, hardware=(), token=None, delay=0.0, raw=None,
                 trickle=0.0, location=None, program_time=0.5,
                 program_delay=0.0):
        self.location = location
        self.program_time = program_time
        self.program_delay = program_delay
        #: Job id -> (job, the monotonic time it ends).
        self.jobs = {}
        #: The job ids of every POST /program, and the caller's port.
        self.program_posts = []
        self.program_posted = threading.Event()
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

            def do_POST(self):
                body = json.loads(self.rfile.read(int(
                    self.headers['Content-Length'])))
                if self.path != '/program' or 'job_id' not in body:
                    return self._answer(404, {'error': {
                        'code': 404, 'message': 'no such resource'}})
                job_id = body['job_id']
                agent.program_posts.append((job_id, self.client_address[1]))
                code = 200 if job_id in agent.jobs else 202
                if code == 202:
                    agent.jobs[job_id] = (dict(
                        body, id=job_id, status='running', error=None),
                        time.monotonic() + agent.program_time)
                agent.program_posted.set()
                agent._stopping.wait(agent.program_delay)
                self._answer(code, {'program': agent.job(job_id)})

            def do_GET(self):
                agent.requests.append(
                    (self.path, self.headers.get('X-Auth-Token')))
                job_id = self.path.rpartition('/')[2]
                if self.path.startswith('/program/') and job_id in \
                        agent.jobs:
                    return self._answer(200, {'program': agent.job(job_id)})
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

    def job(self, job_id):
        """The job ``job_id`` as the agent shows it now."""
        job, ends = self.jobs[job_id]
        if time.monotonic() >= ends:
            job = dict(job, status='succeeded')
        return job

    def stop(self):
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
