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

"""The Apache 2.0 LICENSE file, and its notice atop every Python file.

hacking's H102 and H103 only run when a ``LICENSE`` naming the Apache
License sits where flake8 is started, and skip files of ten lines or
less; this test holds every non-empty Python file of the repository to
the notice, whatever its length and wherever the tests are run from.
"""

import os
import re

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

#: Directories that are not the project's own sources (as flake8's exclude).
SKIP_DIRS = {'build', 'dist', '__pycache__', 'node_modules'}
#: Build output below the documentation trees.
SKIP_PATHS = {os.path.join('doc', 'build'),
              os.path.join('releasenotes', 'build')}

#: The notice, as hacking's H103 compares it: without '#', spaces collapsed.
NOTICE = ' '.join('''
Licensed under the Apache License, Version 2.0 (the "License"); you may
not use this file except in compliance with the License. You may obtain
a copy of the License at

http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
License for the specific language governing permissions and limitations
under the License.
'''.split())

CODING = re.compile(r'^[ \t\f]*#.*?coding[:=]')


def python_files():
    for directory, dirs, files in os.walk(TOP):
        rel = os.path.relpath(directory, TOP)
        dirs[:] = sorted(
            d for d in dirs
            if not d.startswith('.') and d not in SKIP_DIRS
            and not d.endswith('.egg-info')
            and os.path.normpath(os.path.join(rel, d)) not in SKIP_PATHS)
        for name in sorted(files):
            if name.endswith('.py'):
                yield os.path.join(directory, name)


def has_notice(text):
    """Whether the comment block opening ``text`` carries the notice.

    The block may follow a shebang and an encoding line.
    """
    lines = text.splitlines()
    if lines and lines[0].startswith('#!'):
        lines = lines[1:]
    if lines and CODING.match(lines[0]):
        lines = lines[1:]
    block = []
    for line in lines:
        if not line.startswith('#'):
            break
        block.append(line.lstrip('#'))
    return NOTICE in ' '.join(' '.join(block).split())


def test_python_files_carry_the_apache_notice():
    files = list(python_files())
    rels = {os.path.relpath(path, TOP) for path in files}
    # The walk reaches the project, and only it.
    assert 'setup.py' in rels
    assert os.path.join('cyborg_nova', 'store', 'database.py') in rels
    assert not any(rel.startswith(('.venv', 'build' + os.sep))
                   for rel in rels)
    missing = []
    for path in files:
        with open(path, encoding='utf-8') as f:
            text = f.read()
        # Empty files stay empty: a notice alone is H104 (only comments).
        if text.strip() and not has_notice(text):
            missing.append(os.path.relpath(path, TOP))
    assert not missing, (
        'Python files without the Apache 2.0 license header at their top:'
        '\n  ' + '\n  '.join(missing))


def test_has_notice():
    with open(__file__, encoding='utf-8') as f:
        notice = f.read()
    assert has_notice(notice)
    assert has_notice('#!/usr/bin/env python3\n' + notice)
    assert has_notice('# -*- coding: utf-8 -*-\n' + notice)
    assert not has_notice('"""Doc."""\n' + notice)
    assert not has_notice(notice.replace('WITHOUT', 'WITH', 1))
    assert not has_notice('import os\n')


def test_license_file_is_apache_2():
    path = os.path.join(TOP, 'LICENSE')
    assert os.path.isfile(path), 'no LICENSE at the top of the repository'
    with open(path, encoding='utf-8') as f:
        lines = [line.strip() for line in f if line.strip()]
    assert lines[:3] == ['Apache License',
                         'Version 2.0, January 2004',
                         'http://www.apache.org/licenses/']
    assert ('TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION'
            in lines)
    assert lines[-1].endswith('of your accepting any such warranty or '
                              'additional liability.')
