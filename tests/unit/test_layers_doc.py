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

"""The architecture page lists every module of the three packages.

A contributor looks for where a change goes in
``doc/source/contributor/layers.rst``; a module missing from its
"Every module" tables, or a row left behind by a module that moved, is
found here rather than by a reader.
"""

import os
import re

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
PACKAGES = ('cyborg_drivers', 'privsep', 'cyborg_nova')
PAGE = os.path.join(TOP, 'doc', 'source', 'contributor', 'layers.rst')


def modules(top: str) -> set[str]:
    found = set()
    for package in PACKAGES:
        for folder, dirs, files in os.walk(os.path.join(top, package)):
            dirs[:] = [d for d in dirs if d != '__pycache__']
            found.update(
                os.path.relpath(os.path.join(folder, f), top)
                for f in files if f.endswith('.py'))
    return found


def listed(page_text: str) -> set[str]:
    section = page_text.split('\nEvery module\n', 1)[-1]
    return set(re.findall(r'^   \* - ``([\w/]+\.py)``$', section, re.M))


def problems(top: str, page_text: str) -> list[str]:
    have, rows = modules(top), listed(page_text)
    return (['not listed: %s' % m for m in sorted(have - rows)]
            + ['listed but gone: %s' % m for m in sorted(rows - have)])


def test_every_module_is_listed_once_and_nothing_else():
    with open(PAGE) as page:
        text = page.read()
    assert problems(TOP, text) == []
    rows = re.findall(r'^   \* - ``([\w/]+\.py)``$',
                      text.split('\nEvery module\n', 1)[-1], re.M)
    assert len(rows) == len(set(rows))


def test_the_check_finds_a_missing_and_a_stale_row(tmp_path):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / '__init__.py').write_text('')
    (tmp_path / 'cyborg_nova' / 'new.py').write_text('')
    page = ('Every module\n============\n\n'
            '   * - ``cyborg_drivers/__init__.py``\n'
            '   * - ``privsep/__init__.py``\n'
            '   * - ``cyborg_nova/__init__.py``\n'
            '   * - ``cyborg_nova/moved.py``\n')
    assert problems(str(tmp_path), page) == [
        'not listed: cyborg_nova/new.py',
        'listed but gone: cyborg_nova/moved.py']
