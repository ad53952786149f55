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

"""Add up JUnit XML reports into one closing line.

Usage: python tools/junit_summary.py [--no-skips] REPORT.xml [...]

Prints each suite's counts, every failed test with the start of its
message (a CI log that keeps only its end still names the failure, a
random test's seed included), every skipped test with its reason, then
``total: N passed, N failed, N skipped`` (errors count as failed). Exit 1
if a report is missing or unreadable, or, with ``--no-skips``, if any
test was skipped: where the set-up could install everything (as root),
a skip means a missing install step, which must fail CI rather than pass
quietly.
"""

import re
import sys
import xml.etree.ElementTree as ET


# How much of a failure's message is printed: enough for a random
# test's seed and what failed.
MESSAGE_CHARS = 600


# testtools' placeholder message, as pytest reports it with or without
# its ``Failed: `` prefix.
PLACEHOLDER = re.compile(r'(Failed: )?NOTE: Incompatible Exception')


# The line of a Python traceback that names the exception.
EXCEPTION_LINE = re.compile(r'[A-Za-z_][\w.]*(Error|Exception|Failure)\b')


def fault_message(fault):
    """What a failure or error said, on one line.

    pytest puts the exception in ``message``. A testtools test's report
    has only a placeholder there (pytest may prefix it, ``Failed: NOTE:
    Incompatible ...``), its logs first in the text and the traceback
    last: the last line naming an exception, and what follows it, say
    what failed.
    """
    message = fault.get('message') or ''
    text = fault.text or ''
    if not message or PLACEHOLDER.match(message):
        lines = text.splitlines()
        starts = [i for i, line in enumerate(lines)
                  if EXCEPTION_LINE.match(line)]
        message = '\n'.join(lines[starts[-1]:]) if starts else (
            message or text)
    return ' '.join(message.split())[:MESSAGE_CHARS]


def counts(path):
    """The counts of the report at ``path``, and what each test said.

    (passed, failed, skipped, [(test, reason) of each skip],
    [(test, message) of each failure or error])
    """
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == 'testsuite' else root.iter('testsuite')
    tests = failed = skipped = 0
    skips, failures = [], []
    for suite in suites:
        tests += int(suite.get('tests', 0))
        failed += int(suite.get('failures', 0)) + int(suite.get('errors', 0))
        skipped += int(suite.get('skipped', 0))
        for case in suite.iter('testcase'):
            name = '%s.%s' % (case.get('classname'), case.get('name'))
            for skip in case.iter('skipped'):
                skips.append((name, skip.get('message', '')))
            for tag in ('failure', 'error'):
                for fault in case.iter(tag):
                    failures.append((name, fault_message(fault)))
    return tests - failed - skipped, failed, skipped, skips, failures


def main(argv):
    no_skips = '--no-skips' in argv
    paths = [a for a in argv if a != '--no-skips']
    total = [0, 0, 0]
    ok = True
    for path in paths:
        try:
            passed, failed, skipped, skips, failures = counts(path)
        except (OSError, ET.ParseError) as exc:
            print('%s: no report (%s)' % (path, exc))
            ok = False
            continue
        print('%s: %d passed, %d failed, %d skipped'
              % (path.rsplit('/', 1)[-1], passed, failed, skipped))
        for test, message in failures:
            print('  failed %s: %s' % (test, message))
        for test, reason in skips:
            print('  skipped %s: %s' % (test, reason))
        total = [total[0] + passed, total[1] + failed, total[2] + skipped]
    print('total: %d passed, %d failed, %d skipped' % tuple(total))
    if no_skips and total[2]:
        print('%d tests skipped where nothing should be: the set-up ran as '
              'root and installs what every test needs' % total[2])
        ok = False
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
