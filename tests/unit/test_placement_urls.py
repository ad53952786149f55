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

"""Placement's URLs are built in one module: :mod:`cyborg_nova.placement`.

Every string constant of every other module of ``cyborg_nova`` is read
with ``ast``; one that holds a Placement path is a request built beside
the client, with its own errors and retries. Docstrings may name an
endpoint (they build nothing). ``cyborg_nova.virt`` is left out: inside
nova-compute it goes through Nova's own report client.
"""

from __future__ import annotations

import ast
import os
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
#: What a Placement URL starts its path with.
PATHS = ('/resource_providers', '/allocations', '/traits', '/usages',
         '/allocation_candidates')
#: Relative to the package: the client, and what uses Nova's.
ALLOWED = ('placement.py', 'virt' + os.sep)


def _docstrings(tree: ast.AST) -> set[int]:
    """``id()`` of the docstring nodes of a module, classes, functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                             ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (isinstance(first, ast.Expr)
                    and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                found.add(id(first.value))
    return found


def url_literals(source: str, path: str = '<source>'
                 ) -> list[tuple[int, str]]:
    """``(line, text)`` of each string constant holding a Placement path."""
    tree = ast.parse(source, path)
    skip = _docstrings(tree)
    return sorted(
        (node.lineno, node.value) for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and id(node) not in skip
        and any(p in node.value for p in PATHS))


def offenders(package: str) -> list[str]:
    """``path:line: text`` of the URL literals outside the client."""
    found = []
    for directory, dirs, files in os.walk(package):
        dirs[:] = sorted(d for d in dirs if not d.startswith('.'))
        for name in sorted(files):
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, package)
            if not name.endswith('.py') or rel.startswith(ALLOWED):
                continue
            with open(path, encoding='utf-8') as f:
                for line, text in url_literals(f.read(), path):
                    found.append('%s:%d: %r' % (rel, line, text))
    return found


def test_placement_urls_are_built_only_by_the_client():
    found = offenders(os.path.join(ROOT, 'cyborg_nova'))
    assert not found, (
        'Placement URLs outside cyborg_nova/placement.py (use its '
        'Client):\n' + '\n'.join(found))


def test_the_client_builds_them():
    # The scan is not blind: it finds the client's own.
    with open(os.path.join(ROOT, 'cyborg_nova', 'placement.py'),
              encoding='utf-8') as f:
        found = {text for _, text in url_literals(f.read())}
    assert {'/resource_providers', '/allocations', '/traits'} <= found


def test_the_scan_finds_planted_urls(tmp_path):
    package = tmp_path / 'cyborg_nova'
    (package / 'virt').mkdir(parents=True)
    (package / 'placement.py').write_text("URL = '/resource_providers'\n")
    (package / 'virt' / 'driver.py').write_text("URL = '/allocations/%s'\n")
    (package / 'planted.py').write_text(textwrap.dedent('''\
        """Reads ``GET /resource_providers/{uuid}/usages``."""


        class Reader:
            """Of ``/traits``."""

            def read(self, client, uuid):
                """``GET /allocations``."""
                base = '/resource_providers/%s' % uuid
                client.get(base + '/usages')
                return client.get(f'/allocation_candidates?limit={uuid}')
        '''))
    assert offenders(str(package)) == [
        "planted.py:9: '/resource_providers/%s'",
        "planted.py:10: '/usages'",
        "planted.py:11: '/allocation_candidates?limit='",
    ]
