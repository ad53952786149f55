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


"""The library and privsep ask a family's driver; they never name one.

Every module of ``cyborg_nova`` and ``privsep`` is read with ``ast``:

- none may import a driver plugin module (a target of the
  ``cyborg_nova.drivers`` entry points in ``setup.cfg``), at module
  level or inside a function: a family's facts (e.g.
  ``cyborg_drivers.qat.products``) are what privsep checks against;
- none may branch on a driver's entry-point name: compare a value to it
  (``==``, ``!=``, ``in``, ``is``), key a dict literal or a subscript by
  it, test it in an ``if``, ``while``, conditional expression or
  ``match``.

The names may still appear in docstrings, log and exception messages
and option help, which are not decisions.
"""

from __future__ import annotations

import ast
import configparser
import dataclasses
import os
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
#: The packages that must not know the families by name.
CHECKED = ('cyborg_nova', 'privsep')
NAMESPACE = 'cyborg_nova.drivers'


@dataclasses.dataclass(frozen=True, order=True)
class Finding:
    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return '%s:%d: %s' % (self.path, self.line, self.what)


def plugins(root: str) -> dict[str, str]:
    """Entry-point name -> the module of its driver, from setup.cfg."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(os.path.join(root, 'setup.cfg'))
    found = {}
    for line in parser['entry_points'][NAMESPACE].splitlines():
        if '=' not in line:
            continue
        name, target = (part.strip() for part in line.split('=', 1))
        found[name] = target.split(':')[0]
    return found


def _imported(node: ast.AST) -> list[str]:
    """The modules (and names within them) an import statement names."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and not node.level:
        return [node.module] + ['%s.%s' % (node.module, alias.name)
                                for alias in node.names]
    return []


def _is_plugin(module: str, modules: set[str]) -> bool:
    return any(module == m or module.startswith(m + '.') for m in modules)


def _names_in(node: ast.AST | None, names: set[str]) -> list[str]:
    """Driver names that are string constants anywhere in ``node``."""
    if node is None:
        return []
    return [n.value for n in ast.walk(node)
            if isinstance(n, ast.Constant) and n.value in names]


def _decisions(node: ast.AST) -> list[ast.AST]:
    """The parts of ``node`` whose string constants decide something."""
    if isinstance(node, ast.Compare):
        return [node.left] + list(node.comparators)
    if isinstance(node, ast.Dict):
        return [k for k in node.keys if k is not None]
    if isinstance(node, ast.Subscript):
        return [node.slice]
    if isinstance(node, (ast.If, ast.While, ast.IfExp)):
        return [node.test]
    if isinstance(node, ast.match_case):
        return [node.pattern]
    return []


def check_module(path: str, source: str, entry_points: dict[str, str]
                 ) -> list[Finding]:
    """What in one module names a driver plugin or branches on a name."""
    modules = set(entry_points.values())
    names = set(entry_points)
    found = set()
    for node in ast.walk(ast.parse(source, path)):
        for module in _imported(node):
            if _is_plugin(module, modules):
                found.add(Finding(path, node.lineno,
                                  'imports driver plugin %s' % module))
        for part in _decisions(node):
            for name in _names_in(part, names):
                found.add(Finding(path, getattr(node, 'lineno',
                                                getattr(part, 'lineno', 0)),
                                  'decides on driver name %r' % name))
    return sorted(found)


def check(root: str) -> list[Finding]:
    entry_points = plugins(root)
    found = []
    for package in CHECKED:
        for where, dirs, files in os.walk(os.path.join(root, package)):
            dirs[:] = sorted(d for d in dirs if d != '__pycache__')
            for name in sorted(files):
                if not name.endswith('.py'):
                    continue
                path = os.path.join(where, name)
                with open(path) as f:
                    source = f.read()
                found += check_module(os.path.relpath(path, root), source,
                                      entry_points)
    return found


def test_the_library_and_privsep_name_no_family():
    found = check(ROOT)
    assert not found, ('the library and privsep must ask the driver, not '
                       'name it:\n' + '\n'.join(str(f) for f in found))


def test_every_driver_entry_point_is_read():
    # The checker sees every packaged driver, so a new one is covered.
    assert set(plugins(ROOT)) == {'generic', 'nvidia_gpu', 'intel_fpga',
                                  'xilinx_fpga', 'intel_qat', 'nic_sriov',
                                  'fake'}
    assert all(m.startswith('cyborg_drivers.')
               for m in plugins(ROOT).values())


def _write(root, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = os.path.join(str(root), relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, 'w') as f:
            f.write(textwrap.dedent(text))


PLANTED_SETUP = """\
[metadata]
name = planted

[entry_points]
cyborg_nova.drivers =
    intel_qat = cyborg_drivers.qat.driver:IntelQatDriver
    # a comment between entries
    nvidia_gpu = cyborg_drivers.nvidia.driver:NvidiaGpuDriver
"""


def test_the_checker_finds_what_is_planted(tmp_path):
    _write(tmp_path, {
        'setup.cfg': PLANTED_SETUP,
        'cyborg_nova/__init__.py': '',
        'cyborg_nova/bad.py': """\
            '''Mentions intel_qat and nvidia_gpu: allowed.'''
            import logging

            from cyborg_drivers.qat import driver

            LOG = logging.getLogger(__name__)
            TABLE = {'nvidia_gpu': 1}


            def pick(name, caps):
                if name != 'intel_qat':
                    raise ValueError('only intel_qat has services')
                if name in ('nvidia_gpu', 'other'):
                    LOG.info('driver %s', 'nvidia_gpu')
                value = caps['intel_qat']
                return 1 if name == 'nvidia_gpu' else value


            def lazy():
                import cyborg_drivers.nvidia.driver
                return cyborg_drivers.nvidia.driver, driver


            def matched(name):
                match name:
                    case 'intel_qat':
                        return 1
                return 0
            """,
        'cyborg_nova/good.py': """\
            '''Asks the driver: nothing here names one.'''
            from cyborg_drivers import loader


            def ask(name, setting):
                driver = loader.load(None, [name])[0]
                if setting not in driver.SETTINGS:
                    raise ValueError('the setting is intel_qat\\'s')
                return {'services': driver.name}
            """,
        'privsep/__init__.py': '',
        'privsep/qat.py': """\
            from cyborg_drivers.qat import products
            from cyborg_drivers.qat.driver import IntelQatDriver
            """,
        'privsep/mdev.py': """\
            from cyborg_drivers.nvidia import vgpu

            HELP = 'written for the nvidia_gpu driver'
            """,
    })
    assert [str(f) for f in check(str(tmp_path))] == [
        'cyborg_nova/bad.py:4: imports driver plugin '
        'cyborg_drivers.qat.driver',
        "cyborg_nova/bad.py:7: decides on driver name 'nvidia_gpu'",
        "cyborg_nova/bad.py:11: decides on driver name 'intel_qat'",
        "cyborg_nova/bad.py:13: decides on driver name 'nvidia_gpu'",
        "cyborg_nova/bad.py:15: decides on driver name 'intel_qat'",
        "cyborg_nova/bad.py:16: decides on driver name 'nvidia_gpu'",
        'cyborg_nova/bad.py:20: imports driver plugin '
        'cyborg_drivers.nvidia.driver',
        "cyborg_nova/bad.py:26: decides on driver name 'intel_qat'",
        'privsep/qat.py:2: imports driver plugin cyborg_drivers.qat.driver',
        'privsep/qat.py:2: imports driver plugin '
        'cyborg_drivers.qat.driver.IntelQatDriver',
    ]
