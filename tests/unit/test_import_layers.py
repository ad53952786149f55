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

"""The stack: every import goes down a layer, or stays in its own.

1. hardware knowledge, without Nova: ``cyborg_drivers`` and ``privsep``;
2. the library: the rest of ``cyborg_nova`` (Placement clients, the
   state store, assignments, attach, programming, providers, conf...);
3. the services: ``cyborg_nova.agent``, ``cyborg_nova.conductor`` and
   ``cyborg_nova.remote_driver`` (an out-of-process driver), and
   ``cyborg_nova.api``, the HTTP layer they share (it serves their
   routes and imports neither);
4. the edges: ``cyborg_nova.virt`` (the only importer of ``nova``) and
   ``cyborg_nova.cmd`` (the entry points, which may import anything).

Every import counts, at module level or inside a function (a lazy import
is still an arrow), except those under ``if TYPE_CHECKING:``; so do
``importlib.import_module()`` and ``__import__()`` of a literal name.
Within a layer: the agent, the conductor and the driver service never
import each other's modules, the shared HTTP layer imports none of them,
and ``virt`` does not import ``cmd``.

One arrow up is allowed, and checked: the privsep daemons read their own
options (``[cyborg_nova_privsep]``) from :mod:`cyborg_nova.conf.privsep`,
which is allowed only while everything importing it loads is the
``cyborg_nova.conf`` option package (no library, no service, no Nova).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
PACKAGES = ('cyborg_drivers', 'privsep', 'cyborg_nova')

HARDWARE, LIBRARY, SERVICES, EDGES = 1, 2, 3, 4
LAYERS = {HARDWARE: 'hardware', LIBRARY: 'library', SERVICES: 'services',
          EDGES: 'edges'}
AGENT, CONDUCTOR = 'cyborg_nova.agent', 'cyborg_nova.conductor'
DRIVER = 'cyborg_nova.remote_driver'
#: The HTTP layer both services use.
SHARED_HTTP = 'cyborg_nova.api'
VIRT, CMD = 'cyborg_nova.virt', 'cyborg_nova.cmd'
#: What privsep may read its options from, while it stays pure.
CONF = 'cyborg_nova.conf'


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + '.')


def layer(module: str) -> int | None:
    """The layer of a project module; None for anything else."""
    top = module.split('.')[0]
    if top in ('cyborg_drivers', 'privsep'):
        return HARDWARE
    if top != 'cyborg_nova':
        return None
    if within(module, VIRT) or within(module, CMD):
        return EDGES
    if any(within(module, p) for p in (AGENT, CONDUCTOR, DRIVER, SHARED_HTTP)):
        return SERVICES
    return LIBRARY


def is_nova(module: str) -> bool:
    return module.split('.')[0] == 'nova'


@dataclasses.dataclass(frozen=True)
class Arrow:
    """One import that breaks the stack."""

    source: str
    target: str
    path: str
    line: int
    why: str

    def __str__(self) -> str:
        return '%s:%d: %s imports %s: %s' % (
            self.path, self.line, self.source, self.target, self.why)


def find_modules(root: str) -> dict[str, tuple[str, bool]]:
    """``{module: (path, is_package)}`` of the packages under ``root``."""
    found = {}
    for package in PACKAGES:
        top = os.path.join(root, package)
        for directory, dirs, files in os.walk(top):
            dirs[:] = sorted(d for d in dirs
                             if not d.startswith(('.', '__pycache__')))
            rel = os.path.relpath(directory, root).split(os.sep)
            for name in sorted(files):
                if not name.endswith('.py'):
                    continue
                path = os.path.join(directory, name)
                if name == '__init__.py':
                    found['.'.join(rel)] = (path, True)
                else:
                    found['.'.join(rel + [name[:-3]])] = (path, False)
    return found


class _Imports(ast.NodeVisitor):
    """Every import of one module, with its line; lazy ones included."""

    def __init__(self, module: str, is_package: bool,
                 known: set[str]) -> None:
        self.package = module if is_package else module.rpartition('.')[0]
        self.known = known
        self.found: list[tuple[str, int]] = []

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        name = (test.id if isinstance(test, ast.Name)
                else test.attr if isinstance(test, ast.Attribute) else None)
        if name != 'TYPE_CHECKING':
            self.visit(node.test)
            for child in node.body:
                self.visit(child)
        for child in node.orelse:
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.found.append((alias.name, node.lineno))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            parts = self.package.split('.')
            base = '.'.join(parts[:len(parts) - node.level + 1])
            base = '.'.join(filter(None, (base, node.module)))
        else:
            base = node.module or ''
        ours = base.split('.')[0] in PACKAGES
        for alias in node.names:
            # ``from pkg import module`` imports the module; ``from
            # module import name`` the module that defines the name
            # (outside the project, the longer name says more).
            candidate = '%s.%s' % (base, alias.name)
            self.found.append((candidate if candidate in self.known
                               or not ours else base, node.lineno))

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = (func.id if isinstance(func, ast.Name)
                else func.attr if isinstance(func, ast.Attribute) else None)
        if (name in ('import_module', '__import__') and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)):
            self.found.append((node.args[0].value, node.lineno))
        self.generic_visit(node)


def import_graph(root: str) -> dict[str, list[tuple[str, int]]]:
    """``{module: [(imported module, line)]}`` for every project module."""
    modules = find_modules(root)
    known = set(modules)
    graph = {}
    for module, (path, is_package) in modules.items():
        with open(path, encoding='utf-8') as f:
            tree = ast.parse(f.read(), path)
        visitor = _Imports(module, is_package, known)
        visitor.visit(tree)
        graph[module] = visitor.found
    return graph


def _loaded(graph: dict, module: str) -> set[str]:
    """The project modules importing ``module`` loads (parents included)."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        parts = name.split('.')
        for i in range(1, len(parts) + 1):
            prefix = '.'.join(parts[:i])
            if prefix in graph and prefix not in seen:
                seen.add(prefix)
                todo.extend(target for target, _ in graph[prefix])
    return seen


def _why(graph: dict, source: str, target: str) -> str | None:
    """Why the import ``source -> target`` breaks the stack, or None."""
    if within(source, CMD):
        return None
    if is_nova(target):
        if within(source, VIRT):
            return None
        return 'only %s may import Nova' % VIRT
    src, dst = layer(source), layer(target)
    if dst is None or src is None:
        return None
    if dst > src:
        if within(source, 'privsep') and within(target, CONF):
            impure = sorted(m for m in _loaded(graph, target)
                            if layer(m) != HARDWARE
                            and m != 'cyborg_nova' and not within(m, CONF))
            if not impure:
                return None
            return ('privsep may read its options from %s only while it '
                    'loads nothing else of cyborg_nova; it loads %s'
                    % (CONF, ', '.join(impure)))
        return 'up from the %s layer to the %s layer' % (LAYERS[src],
                                                         LAYERS[dst])
    if src == dst == SERVICES:
        services = (AGENT, CONDUCTOR, DRIVER)
        pairs = [(a, b) for a in services for b in services if a != b]
        pairs += [(SHARED_HTTP, s) for s in services]
        for mine, other in pairs:
            if within(source, mine) and within(target, other):
                return '%s must not import %s' % (mine, other)
    if within(source, VIRT) and within(target, CMD):
        return '%s must not import %s' % (VIRT, CMD)
    return None


def check(root: str) -> list[Arrow]:
    """Every import under ``root`` that breaks the stack."""
    graph = import_graph(root)
    modules = find_modules(root)
    arrows = []
    for source in sorted(graph):
        for target, line in graph[source]:
            why = _why(graph, source, target)
            if why:
                path = os.path.relpath(modules[source][0], root)
                arrows.append(Arrow(source, target, path, line, why))
    return arrows


def circles(root: str) -> list[list[str]]:
    """Groups of project modules that import each other, lazily or not."""
    graph = import_graph(root)

    def known(name: str) -> str:
        while name and name not in graph:
            name = name.rpartition('.')[0]
        return name
    edges = {m: sorted({known(t) for t, _ in graph[m]} - {'', m})
             for m in graph}
    # Tarjan's strongly connected components, without recursion.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    work.append((child, iter(edges[child])))
                elif child in stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return sorted(found)


# -- the tests ---------------------------------------------------------------

def test_every_import_goes_down_the_stack():
    arrows = check(ROOT)
    assert not arrows, 'imports that break the stack:\n' + '\n'.join(
        str(a) for a in arrows)


def test_no_import_circles():
    # E.g. the privileged FPGA check must not load the drivers that call
    # it: both read the cards through cyborg_drivers.fpga.regions.
    assert circles(ROOT) == []


def test_every_module_has_a_layer():
    modules = find_modules(ROOT)
    assert {m.split('.')[0] for m in modules} == set(PACKAGES)
    assert all(layer(m) for m in modules)
    # The packages the brief names are where it says.
    assert layer('cyborg_drivers.guest_xml') == HARDWARE
    assert layer('privsep.libvirt') == HARDWARE
    assert layer('cyborg_nova.fencing') == LIBRARY
    assert layer('cyborg_nova.api.schemas') == SERVICES
    assert layer('cyborg_nova.agent.service') == SERVICES
    assert layer('cyborg_nova.virt.guest') == EDGES


def _write(root, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_the_checker_finds_planted_arrows(tmp_path):
    _write(tmp_path, {
        'cyborg_drivers/__init__.py': '',
        'cyborg_drivers/sysfs.py': 'import os\n',
        'cyborg_drivers/planted.py': '''\
            from typing import TYPE_CHECKING

            from cyborg_drivers import sysfs

            if TYPE_CHECKING:
                from cyborg_nova.agent import host


            def discover():
                from cyborg_nova.agent import service
                return service, sysfs


            def parse():
                import nova.pci.whitelist
                return nova.pci.whitelist
            ''',
        'privsep/__init__.py': 'from cyborg_nova.conf import privsep\n',
        'cyborg_nova/__init__.py': '',
        'cyborg_nova/conf/__init__.py': '',
        'cyborg_nova/conf/privsep.py': 'import os\n',
        'cyborg_nova/state.py': 'from cyborg_drivers import sysfs\n',
        'cyborg_nova/agent/__init__.py': '',
        'cyborg_nova/agent/host.py': 'from cyborg_nova import state\n',
        'cyborg_nova/agent/service.py': 'from . import host\n',
        'cyborg_nova/conductor/__init__.py': '',
        'cyborg_nova/virt/__init__.py': '',
        'cyborg_nova/virt/guest.py': '''\
            from nova.virt.libvirt import config

            from cyborg_nova.agent import host
            ''',
        'cyborg_nova/cmd/__init__.py': '',
        'cyborg_nova/cmd/cli.py': '''\
            def main():
                import nova.conf
                from cyborg_nova.virt import guest
                return nova.conf, guest
            ''',
    })
    found = [(a.source, a.target, a.line) for a in check(str(tmp_path))]
    assert found == [
        ('cyborg_drivers.planted', 'cyborg_nova.agent.service', 10),
        ('cyborg_drivers.planted', 'nova.pci.whitelist', 15),
    ]


def test_the_checker_knows_the_other_rules(tmp_path):
    files = {
        'cyborg_drivers/__init__.py': '',
        'privsep/__init__.py': 'from cyborg_nova.conf import privsep\n',
        'cyborg_nova/__init__.py': '',
        'cyborg_nova/conf/__init__.py': '',
        # An option module that pulls the library: privsep may no longer
        # read its options from it.
        'cyborg_nova/conf/privsep.py': 'from cyborg_nova import state\n',
        'cyborg_nova/state.py': 'import importlib\n',
        'cyborg_nova/audit.py': '''\
            import importlib
            def nova():
                return importlib.import_module('nova.objects')
            ''',
        'cyborg_nova/agent/__init__.py': '',
        'cyborg_nova/agent/api.py': 'from cyborg_nova.api import app\n',
        'cyborg_nova/api/__init__.py': '',
        'cyborg_nova/api/app.py': '',
        'cyborg_nova/api/schemas.py': 'from cyborg_nova.agent import api\n',
        'cyborg_nova/conductor/__init__.py': '',
        'cyborg_nova/conductor/api.py':
            'from cyborg_nova.agent import api as agent_api\n',
        'cyborg_nova/virt/__init__.py': 'from cyborg_nova.cmd import cli\n',
        'cyborg_nova/cmd/__init__.py': '',
        'cyborg_nova/cmd/cli.py': '',
    }
    _write(tmp_path, files)
    assert circles(str(tmp_path)) == []
    found = {(a.source, a.target) for a in check(str(tmp_path))}
    assert found == {
        ('privsep', 'cyborg_nova.conf.privsep'),
        ('cyborg_nova.audit', 'nova.objects'),
        ('cyborg_nova.api.schemas', 'cyborg_nova.agent.api'),
        ('cyborg_nova.conductor.api', 'cyborg_nova.agent.api'),
        ('cyborg_nova.virt', 'cyborg_nova.cmd.cli'),
    }


#: Run with Nova made impossible to import: the privileged modules load.
_NO_NOVA = '''
import importlib.abc
import json
import sys


class NoNova(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == 'nova' or name.startswith('nova.'):
            raise ImportError('importing %s is impossible here' % name)
        return None


sys.meta_path.insert(0, NoNova())
sys.path.insert(0, sys.argv[1])
try:
    import nova  # noqa: F401
    blocked = False
except ImportError:
    blocked = True
import privsep.fpga
import privsep.libvirt
import privsep.mdev
import privsep.nova_conf
import privsep.pci
import privsep.qat
print(json.dumps({
    'blocked': blocked,
    'files': {m: getattr(sys.modules[m], '__file__', None)
              for m in ('privsep', 'cyborg_drivers')},
    'loaded': sorted(m for m in sys.modules
                     if m.split('.')[0] in ('cyborg_nova', 'nova')),
}))
'''


def test_privsep_loads_without_nova_or_the_services():
    proc = subprocess.run(
        [sys.executable, '-I', '-W', 'ignore', '-c', _NO_NOVA, ROOT],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result['blocked']
    # This tree's modules, not an installed copy.
    for path in result['files'].values():
        assert path.startswith(ROOT + os.sep), path
    assert not [m for m in result['loaded'] if is_nova(m)]
    # Its own options only: nothing of the library, services or edges.
    assert [m for m in result['loaded']
            if m != 'cyborg_nova' and not within(m, CONF)] == []


def test_the_checker_finds_circles(tmp_path):
    _write(tmp_path, {
        'cyborg_drivers/__init__.py': '',
        'cyborg_drivers/drivers/__init__.py': '',
        'cyborg_drivers/drivers/fpga.py': """\
            def program():
                import privsep.fpga
                return privsep.fpga
            """,
        'privsep/__init__.py': '',
        'privsep/fpga.py': 'from cyborg_drivers.drivers import fpga\n',
        'privsep/pci.py': 'import privsep\n',
        'cyborg_nova/__init__.py': '',
    })
    assert circles(str(tmp_path)) == [
        ['cyborg_drivers.drivers.fpga', 'privsep.fpga']]
    assert check(str(tmp_path)) == []
