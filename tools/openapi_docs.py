#!/usr/bin/env python3
# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.

"""Write the OpenAPI documents of the agent's and the conductor-lite's APIs.

Builds both WSGI applications in-process, as their unit tests do, with a
throwaway configuration (no config file is read, the conductor-lite's
database is an in-memory SQLite), and writes what each serves at
``GET /openapi.json`` to ``doc/source/api/agent-openapi.json`` and
``doc/source/api/conductor-openapi.json``: two-space indented, keys
sorted, one trailing newline, so that the files only change when an API
does. The documentation renders them (``doc/source/_ext/openapi_table.py``)
without building the applications itself.

Usage: python tools/openapi_docs.py [--check] [--output-dir DIR]

With ``--check`` nothing is written: the exit status is 1, with the names
of the stale files, when a committed document differs from what the code
serves now.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The source tree, not an installed copy that may be older.
sys.path.insert(0, TOP)

DEFAULT_OUTPUT = os.path.join(TOP, 'doc', 'source', 'api')


def _conf(register):
    """A ConfigOpts with ``register``'s options, reading no file."""
    from oslo_config import cfg

    conf = cfg.ConfigOpts()
    register(conf)
    conf([], project='cyborg-nova', default_config_files=[],
         default_config_dirs=[])
    return conf


def agent_document() -> dict:
    """What the agent serves at ``GET /openapi.json``."""
    from cyborg_nova.agent import api
    from cyborg_nova.agent import remote
    from cyborg_nova.conf import agent as agent_conf

    conf = _conf(agent_conf.register_opts)
    # Never started: no thread polls anything.
    registry = remote.Registry(3, 10)
    app = api.build_app(conf, lambda: [], lambda: None, registry)
    return app.openapi()


def conductor_document() -> dict:
    """What the conductor-lite serves at ``GET /openapi.json``."""
    from cyborg_nova.conductor import api
    from cyborg_nova.conductor import db
    from cyborg_nova.conductor import hardware
    from cyborg_nova.conductor import registry
    from cyborg_nova.conf import conductor as conductor_conf

    conf = _conf(conductor_conf.register_opts)
    conf.set_override('connection', 'sqlite://', group='database')
    engine = db.engine_from_conf(conf)
    try:
        agents = registry.Registry(db.AgentStore(engine), 60)
        app = api.make_app(conf, agents, hardware.Collector(None, 1.0))
        return app.openapi()
    finally:
        engine.dispose()


DOCUMENTS = {
    'agent-openapi.json': agent_document,
    'conductor-openapi.json': conductor_document,
}


def render(document: dict) -> str:
    """The committed form of a document."""
    return json.dumps(document, indent=2, sort_keys=True,
                      ensure_ascii=False) + '\n'


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split('\n', 1)[0])
    parser.add_argument('--output-dir', default=DEFAULT_OUTPUT,
                        help='where to write the documents (default: '
                             'doc/source/api of this source tree)')
    parser.add_argument('--check', action='store_true',
                        help='write nothing; exit 1 if a document in '
                             '--output-dir is missing or stale')
    args = parser.parse_args(argv)
    stale = []
    for name, build in DOCUMENTS.items():
        text = render(build())
        path = os.path.join(args.output_dir, name)
        try:
            with open(path, encoding='utf-8') as f:
                current = f.read()
        except FileNotFoundError:
            current = None
        if current == text:
            continue
        if args.check:
            stale.append(name)
            continue
        os.makedirs(args.output_dir, exist_ok=True)
        with open(path, 'w', encoding='utf-8') as f:
            f.write(text)
        print('wrote %s' % os.path.relpath(path))
    if stale:
        print('stale: %s; run python tools/openapi_docs.py'
              % ', '.join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
