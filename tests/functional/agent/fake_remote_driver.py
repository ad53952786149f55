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

"""A vendor's out-of-process driver, as small as the spec allows.

Serves the driver half of the internal API (``GET /hardware``, ``POST
/discovery``) on loopback, registers with an agent (``POST /hello``) once
it serves, prints ``listening <url>`` and then one line per request it
gets (``discovery``, ``hardware``), and serves until killed.

Usage: python fake_remote_driver.py --agent URL --token T [--port N]
           [--type CRYPTO] [--devices N]
"""

import argparse
import http.server
import json
import sys
import threading
import urllib.request
import uuid

NAMESPACE = uuid.UUID('0f6b3c9e-6a43-4d55-9c57-1b9a2f1e7d10')


def hardware(endpoint: str, device_type: str, count: int) -> dict:
    """The spec's example entry, ``count`` times, with stable uuids."""
    return {'hardware': [{
        'uuid': str(uuid.uuid5(NAMESPACE, '%s/%d' % (endpoint, n))),
        'acc_specs': {
            'remote': 0,
            'num': 1,
            'device_type': device_type,
            'acc_capability': {'num': 2, 'ipsec': {'aes': {'3des': 50,
                                                           'num': 1}}},
        },
        'acc_status': {'setup_required': True, 'reboot_required': False},
    } for n in range(count)]}


_say_lock = threading.Lock()


def say(line: str) -> None:
    """One whole line on stdout: request threads print concurrently."""
    with _say_lock:
        sys.stdout.write(line + '\n')
        sys.stdout.flush()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--agent', required=True)
    parser.add_argument('--token', required=True)
    parser.add_argument('--port', type=int, default=0)
    parser.add_argument('--type', default='CRYPTO')
    parser.add_argument('--devices', type=int, default=2)
    args = parser.parse_args()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format, *a):
            pass

        def _json(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header('Content-Type', 'application/json')
            self.send_header('Content-Length', str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path != '/hardware':
                return self._json(404, {'error': 'no such resource'})
            say('hardware')
            self._json(200, hardware(endpoint, args.type, args.devices))

        def do_POST(self):
            if self.path != '/discovery':
                return self._json(404, {'error': 'no such resource'})
            say('discovery')
            self._json(202, {'status': 'IN-PROGRESS'})

    server = http.server.ThreadingHTTPServer(('127.0.0.1', args.port),
                                             Handler)
    endpoint = 'http://127.0.0.1:%d' % server.server_port
    threading.Thread(target=server.serve_forever, daemon=True).start()
    request = urllib.request.Request(
        args.agent.rstrip('/') + '/hello', method='POST',
        data=json.dumps({'status': 'READY', 'endpoint': endpoint,
                         'type': args.type}).encode(),
        headers={'Content-Type': 'application/json',
                 'X-Auth-Token': args.token})
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert resp.status == 200, resp.status
    say('listening %s' % endpoint)
    threading.Event().wait()
    return 0


if __name__ == '__main__':
    sys.exit(main())
