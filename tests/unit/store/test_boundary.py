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


"""Nothing outside the store package connects to the state store.

Every module of ``cyborg_nova``, ``cyborg_drivers`` and ``privsep`` is
read with ``ast``, except those of ``cyborg_nova.store`` (the store
itself) and ``cyborg_nova.conductor`` (the conductor-lite has its own
database, on oslo.db). None may import ``sqlite3`` (by an import
statement, ``importlib.import_module()`` or ``__import__()``), nor touch
the store's private ``_connect`` or ``_transaction``: they call the
store's table API instead.
"""

from __future__ import annotations

import ast
import os
import textwrap

from tests.unit import test_import_layers as layers

#: Allowed to connect: the store, and the conductor-lite's own database.
EXEMPT = ('cyborg_nova.store', 'cyborg_nova.conductor')
PRIVATE = ('_connect', '_transaction')


def _is_sqlite(name: str) -> bool:
    return name == 'sqlite3' or name.startswith('sqlite3.')


def scan(root: str) -> list[str]:
    """``path:line: what`` for each use of the store's internals.

    The imports are those the import layer test finds (lazy ones and
    ``import_module()``/``__import__()`` of a literal name included).
    """
    modules = layers.find_modules(root)
    graph = layers.import_graph(root)
    found = []
    for module, (path, _) in sorted(modules.items()):
        if any(layers.within(module, exempt) for exempt in EXEMPT):
            continue
        uses = [(line, 'imports %s' % target)
                for target, line in graph[module] if _is_sqlite(target)]
        with open(path, encoding='utf-8') as f:
            tree = ast.parse(f.read(), path)
        uses += [(node.lineno, 'uses .%s' % node.attr)
                 for node in ast.walk(tree)
                 if isinstance(node, ast.Attribute)
                 and node.attr in PRIVATE]
        found += ['%s:%d: %s' % (os.path.relpath(path, root), line, what)
                  for line, what in sorted(uses)]
    return found


def test_only_the_store_connects_to_the_store():
    found = scan(layers.ROOT)
    assert not found, (
        'only cyborg_nova.store may connect to the state store; use its '
        'table API:\n' + '\n'.join(found))


def test_the_scan_finds_planted_uses(tmp_path):
    files = {
        'cyborg_drivers/__init__.py': '',
        'cyborg_nova/__init__.py': '',
        'cyborg_nova/store/__init__.py': 'import sqlite3\n',
        'cyborg_nova/store/units.py': '''\
            def rows(store):
                with store._connect() as db:
                    return db
            ''',
        'cyborg_nova/conductor/db.py': 'import sqlite3\n',
        'cyborg_nova/assignments.py': '''\
            from cyborg_nova import store as store_lib


            def rows(store):
                with store._connect() as db:
                    return db.execute('SELECT 1')


            def write(self):
                begin = self.store._transaction
                return begin, store_lib
            ''',
        'cyborg_nova/programming/journal.py': '''\
            import importlib
            import os.path
            import sqlite3.dbapi2
            from sqlite3 import IntegrityError


            def lazily():
                return importlib.import_module('sqlite3'), IntegrityError
            ''',
        'cyborg_drivers/sysfs.py': '''\
            def _connect():
                return None


            def use():
                # A function of that name is no store's.
                return _connect()
            ''',
        'privsep/__init__.py': '',
        'privsep/libvirt.py': 'db = __import__("sqlite3")\n',
    }
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    assert scan(str(tmp_path)) == [
        'cyborg_nova/assignments.py:5: uses ._connect',
        'cyborg_nova/assignments.py:10: uses ._transaction',
        'cyborg_nova/programming/journal.py:3: imports sqlite3.dbapi2',
        'cyborg_nova/programming/journal.py:4: imports '
        'sqlite3.IntegrityError',
        'cyborg_nova/programming/journal.py:8: imports sqlite3',
        'privsep/libvirt.py:1: imports sqlite3',
    ]
