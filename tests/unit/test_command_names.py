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

"""The commands of ``cyborg-nova`` are named noun-verb; old names warn.

The names are read from this tree's ``setup.cfg``, not from an installed
copy, so the checks hold for the code under test.
"""

import configparser
import io
import os
import re

import pytest

from cyborg_nova.cmd import cli
from cyborg_nova.cmd import deprecated

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
#: Kept as they are: one word, no noun to put first.
ONE_WORD = {'discover', 'tree', 'audit', 'program'}
#: An old name in text (either spelling cliff accepts of the whitelist
#: ones), not as part of a longer word or name.
OLD_NAME = re.compile(r'(?<![\w-])(%s)(?![\w-])' % '|'.join(
    re.escape(old).replace(r'\ ', '[ _]')
    for old in sorted(deprecated.RENAMED)))
#: Where an operator reads command names. The deprecated-names section
#: of the CLI page is the one place allowed to list the old ones.
READ = ['README.md', 'doc/source', 'devstack', 'tools',
        'cyborg_nova_tempest_plugin', 'cyborg_nova', 'privsep',
        'cyborg_drivers', 'etc']
ALLOWED = {os.path.join('cyborg_nova', 'cmd', 'deprecated.py')}
CLI_PAGE = os.path.join('doc', 'source', 'cli', 'index.rst')
DEPRECATED_SECTION = 'Deprecated names\n================\n'


def commands(group: str = 'cyborg_nova.cli') -> dict:
    """``{name as typed: command class}`` of a group in setup.cfg."""
    parser = configparser.ConfigParser()
    parser.read(os.path.join(TOP, 'setup.cfg'))
    found = {}
    for line in parser['entry_points'][group].splitlines():
        if not line.strip() or line.lstrip().startswith('#'):
            continue
        name, _, target = (part.strip() for part in line.partition('='))
        module, _, attribute = target.partition(':')
        imported = __import__(module, fromlist=[attribute])
        # cliff reads an underscore of an entry point name as a space.
        found[name.replace('_', ' ')] = getattr(imported, attribute)
    return found


def test_every_current_name_is_noun_verb_with_hyphens():
    current = {n for n, cls in commands().items() if not cls.deprecated}
    assert ONE_WORD <= current
    for name in current - ONE_WORD:
        assert re.fullmatch(r'[a-z]+(-[a-z]+)+', name), name
    assert set(deprecated.RENAMED.values()) <= current


@pytest.mark.parametrize('old, new', sorted(deprecated.RENAMED.items()))
def test_an_old_name_warns_then_runs_the_new_command(old, new,
                                                     monkeypatch):
    found = commands()
    alias, command = found[old], found[new]
    assert issubclass(alias, command)
    assert alias.deprecated and not command.deprecated
    ran = []
    monkeypatch.setattr(command, 'run',
                        lambda self, parsed_args: ran.append(parsed_args))
    app = cli.CyborgNovaApp()
    app.stderr = io.StringIO()
    alias(app, None, cmd_name=old).run('the arguments')
    assert ran == ['the arguments']
    assert app.stderr.getvalue() == '"%s" is deprecated, use "%s"\n' % (
        old, new)


def test_help_lists_the_new_names_only(capsys):
    app = cli.CyborgNovaApp()
    for name, cls in commands().items():
        app.command_manager.add_command(name, cls)
    with pytest.raises(SystemExit):
        app.run(['--help'])
    listed = {line.split()[0] for line in capsys.readouterr().out.split(
        'Commands:', 1)[1].splitlines() if line.startswith('  ')}
    assert set(deprecated.RENAMED.values()) <= listed
    assert not listed & {old.split()[0] for old in deprecated.RENAMED
                         if ' ' not in old}
    assert 'whitelist' not in listed


def _read_raw(path: str) -> str:
    with open(os.path.join(TOP, path), encoding='utf-8') as f:
        return f.read()


def _text(path: str) -> str:
    """The text of ``path`` where no old name may stand."""
    text = _read_raw(path)
    if path == CLI_PAGE:
        before, _, after = text.partition(DEPRECATED_SECTION)
        # The section runs to the next title of its level, if any.
        rest = re.split(r'\n[^\n]+\n=+\n', after, maxsplit=1)
        text = before + (rest[1] if len(rest) > 1 else '')
    return text


def test_docs_and_messages_name_no_old_command():
    found = []
    for top in READ:
        path = os.path.join(TOP, top)
        paths = [top] if os.path.isfile(path) else [
            os.path.relpath(os.path.join(folder, name), TOP)
            for folder, _, files in os.walk(path) for name in files]
        for rel in sorted(paths):
            if rel in ALLOWED or '__pycache__' in rel:
                continue
            try:
                text = _text(rel)
            except UnicodeDecodeError:
                continue
            for n, line in enumerate(text.splitlines(), 1):
                if OLD_NAME.search(line):
                    found.append('%s:%d: %s' % (rel, n, line.strip()))
    assert not found, '\n'.join(found)


def test_the_old_name_check_finds_each_spelling():
    for text in ('run install-driver', '"whitelist show"', 'whitelist_sync',
                 '``detach-instance``'):
        assert OLD_NAME.search(text), text
    for text in ('driver-uninstall', 'whitelist-show', 'the whitelist',
                 'reinstall-driver-x'):
        assert not OLD_NAME.search(text), text
    assert DEPRECATED_SECTION in _read_raw(CLI_PAGE)
