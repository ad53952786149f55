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

"""The documentation and the release notes build with warnings as errors
(what ``tox -e docs`` and ``tox -e releasenotes`` run).
"""

import os
import re
import subprocess
import sys

import pytest

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


@pytest.mark.parametrize('source', ['doc/source', 'releasenotes/source'])
def test_builds_without_warnings(source, tmp_path):
    pytest.importorskip('sphinx', reason='sphinx is not installed '
                        '(pip install -r doc/requirements.txt)')
    if source.startswith('releasenotes'):
        pytest.importorskip('reno', reason='reno is not installed')
    proc = subprocess.run(
        [sys.executable, '-m', 'sphinx', '-q', '-W', '-b', 'html',
         os.path.join(TOP, source), str(tmp_path / 'html')],
        capture_output=True, text=True, cwd=TOP, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


# Words that describe what does not ship as if it would: the docs say
# what the code does, as tested (release notes are history, not docs).
PROMISES = re.compile(r'\b(planned|not part of this release|TODO)\b',
                      re.IGNORECASE)


def test_docs_promise_nothing():
    found = []
    for folder, _, files in os.walk(os.path.join(TOP, 'doc', 'source')):
        for name in files:
            if not name.endswith('.rst'):
                continue
            path = os.path.join(folder, name)
            with open(path, encoding='utf-8') as f:
                for n, line in enumerate(f, 1):
                    if PROMISES.search(line):
                        found.append('%s:%d: %s' % (
                            os.path.relpath(path, TOP), n, line.strip()))
    assert not found, '\n'.join(found)


def test_promise_check_finds_a_planted_word():
    assert PROMISES.search('Programming is planned for later.')
    assert PROMISES.search('This is not part of this release.')
    assert not PROMISES.search('The plan of the host.')
