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

"""Counts a test reports (inputs tried, faults injected, requests made).

:func:`record` prints a line (seen with ``-s`` or in a failure's captured
output) and keeps it; ``tests/conftest.py`` shows every kept line in
pytest's terminal summary, so a plain ``pytest -q`` run, CI's included,
prints them.
"""

LINES: list = []


def record(line: str) -> str:
    """Print and keep ``line``; return it."""
    line = line.strip('\n')
    print('\n' + line)
    LINES.append(line)
    return line
