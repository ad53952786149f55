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

"""A real Placement API server on loopback, for the demo and the tests.

Serves ``placement.wsgi.api:application`` (openstack-placement) with
``noauth2`` (token ``admin``) on SQLite, single-threaded (more than one
writer at a time on SQLite answers 500 "database is locked"). Prints
``listening <url>`` once it accepts requests, then serves until killed.

Usage: python tools/placement_server.py --state-dir DIR [--port N]
"""

import argparse
import os
import sys
from wsgiref import simple_server


class QuietHandler(simple_server.WSGIRequestHandler):
    def log_message(self, format, *args):
        pass


def write_config(state_dir: str) -> None:
    os.makedirs(state_dir, exist_ok=True)
    db = os.path.join(os.path.abspath(state_dir), 'placement.sqlite')
    with open(os.path.join(state_dir, 'placement.conf'), 'w') as f:
        f.write('[DEFAULT]\n'
                'debug = False\n'
                '[api]\n'
                'auth_strategy = noauth2\n'
                '[placement_database]\n'
                'connection = sqlite:///%s\n'
                'sync_on_startup = True\n' % db)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--state-dir', required=True,
                        help='where placement.conf and the database go')
    parser.add_argument('--host', default='127.0.0.1')
    parser.add_argument('--port', type=int, default=0,
                        help='TCP port; 0 (default) picks a free one')
    parser.add_argument('--verbose', action='store_true',
                        help='log every request')
    args = parser.parse_args(argv)
    write_config(args.state_dir)
    os.environ['OS_PLACEMENT_CONFIG_DIR'] = os.path.abspath(args.state_dir)
    # The application is built (and the database synced) on import.
    from placement.wsgi import api
    server = simple_server.make_server(
        args.host, args.port, api.application,
        handler_class=(simple_server.WSGIRequestHandler if args.verbose
                       else QuietHandler))
    print('listening http://%s:%d' % (args.host, server.server_port),
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == '__main__':
    sys.exit(main())
