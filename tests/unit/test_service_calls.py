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

"""Calls between the project's services go through one client.

Every module of ``cyborg_nova`` is read with ``ast``; none but
:mod:`cyborg_nova.service_client` may import an HTTP client library
(``requests``, ``urllib.request``, ``http.client``, ``urllib3``,
``httpx``), at module level or inside a function. There is no other
exception: Placement, which is not one of the project's services, is
called through :mod:`cyborg_nova.placement`, which imports
``keystoneauth1`` (its adapter) and ``urllib.parse`` only, and
``cyborg_nova.virt`` leaves its Placement calls to Nova's report client
and imports none of these either.
"""

from __future__ import annotations

import ast
import os
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
#: Importing any of these (or a module under them) is an HTTP call.
HTTP_LIBRARIES = ('requests', 'urllib.request', 'http.client', 'urllib3',
                  'httpx')
#: The one module allowed to.
CLIENT = os.path.join('cyborg_nova', 'service_client.py')


def _imported(tree: ast.AST) -> list[tuple[str, int]]:
    """(module name, line) of every import in ``tree``.

    ``from http import client`` is the import of ``http.client``.
    """
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and (
                not node.level):
            found.append((node.module, node.lineno))
            found.extend(('%s.%s' % (node.module, alias.name), node.lineno)
                         for alias in node.names)
    return found


def _is_http(name: str) -> bool:
    return any(name == lib or name.startswith(lib + '.')
               for lib in HTTP_LIBRARIES)


def check(root: str) -> list[str]:
    """``path:line imports name`` for each import not allowed."""
    problems = []
    for folder, _, files in os.walk(os.path.join(root, 'cyborg_nova')):
        for name in sorted(files):
            if not name.endswith('.py'):
                continue
            path = os.path.join(folder, name)
            relative = os.path.relpath(path, root)
            if relative == CLIENT:
                continue
            with open(path, encoding='utf-8') as f:
                tree = ast.parse(f.read(), relative)
            problems.extend(
                '%s:%d imports %s' % (relative, line, module)
                for module, line in _imported(tree) if _is_http(module))
    return sorted(set(problems))


def test_only_the_service_client_makes_http_calls():
    problems = check(ROOT)
    assert not problems, (
        'call the project\'s services through cyborg_nova.service_client '
        '(Placement through cyborg_nova.placement):\n' + '\n'.join(problems))


def test_the_client_is_where_the_check_expects_it():
    assert os.path.isfile(os.path.join(ROOT, CLIENT))
    with open(os.path.join(ROOT, CLIENT), encoding='utf-8') as f:
        assert any(_is_http(module) for module, _ in
                   _imported(ast.parse(f.read())))


def test_the_check_finds_planted_imports(tmp_path):
    planted = {
        'cyborg_nova/__init__.py': '',
        'cyborg_nova/service_client.py': 'import requests\n',
        'cyborg_nova/placement.py': '''\
            from keystoneauth1 import adapter
            import urllib.parse
            ''',
        'cyborg_nova/agent/__init__.py': '',
        'cyborg_nova/agent/heartbeat.py': '''\
            import json


            def beat():
                import requests
                return requests, json
            ''',
        'cyborg_nova/conductor/hardware.py': '''\
            from urllib import request
            import urllib.error
            ''',
        'cyborg_nova/cmd/services.py': 'from http import client\n',
        'cyborg_nova/virt/report.py': 'import urllib3.exceptions\n',
        'cyborg_nova/remote_driver/service.py': 'import httpx as h\n',
        'cyborg_nova/http_names.py': '''\
            import http
            import requests_toolbelt
            from .requests import x
            ''',
    }
    for name, text in planted.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    assert check(str(tmp_path)) == [
        'cyborg_nova/agent/heartbeat.py:5 imports requests',
        'cyborg_nova/cmd/services.py:1 imports http.client',
        'cyborg_nova/conductor/hardware.py:1 imports urllib.request',
        'cyborg_nova/remote_driver/service.py:1 imports httpx',
        'cyborg_nova/virt/report.py:1 imports urllib3.exceptions',
    ]
