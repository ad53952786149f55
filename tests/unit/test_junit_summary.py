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

"""tools/junit_summary.py: the closing line of the test command."""

import os
import subprocess
import sys

TOOL = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), 'tools', 'junit_summary.py')

REPORT = '''<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="3" skipped="%d"
 tests="6">
<testcase classname="tests.a" name="test_one"/>
<testcase classname="tests.a" name="test_two"/>
<testcase classname="tests.b" name="test_three"><failure
 message="AssertionError: seed 42 failed after 7 operations&#10;  in op_boot"
 >the traceback</failure>
</testcase>
<testcase classname="tests.c" name="test_five"><failure
 message="NOTE: Incompatible Exception Representation, displaying natively"
 >pythonlogging:'': {{{
2026-11-27 16:02:05,401 INFO [nova.api] GET /v2.1/servers
}}}

Traceback (most recent call last):
  File "tests/c.py", line 346, in test_five
    self.assertEqual([], missing)
testtools.matchers._impl.MismatchError: [] != ['resize']: seed 720931271
never did these
</failure></testcase>
<testcase classname="tests.c" name="test_six"><failure
 message="Failed: NOTE: Incompatible Exception Representation, displaying"
 >pythonlogging:'': {{{
2026-11-27 16:02:05,401 ERROR [nova.compute] Instance failed to spawn
}}}

Traceback (most recent call last):
  File "tests/c.py", line 335, in test_six
    raise AssertionError(
AssertionError: seed 1521868497 failed after 12 operations in op_boot
</failure></testcase>
%s
</testsuite></testsuites>
'''
SKIP = ('<testcase classname="tests.b" name="test_four"><skipped '
        'type="pytest.skip" message="lspci (pciutils) is not installed"/>'
        '</testcase>')


def run(tmp_path, *args, skipped=True):
    path = tmp_path / 'suite.xml'
    path.write_text(REPORT % ((1, SKIP) if skipped else (0, '')))
    return subprocess.run([sys.executable, TOOL, *args, str(path)],
                          capture_output=True, text=True)


def test_counts_and_each_skip_with_its_reason(tmp_path):
    proc = run(tmp_path)
    assert proc.returncode == 0, proc.stdout
    assert 'suite.xml: 2 passed, 3 failed, 1 skipped' in proc.stdout
    assert ('skipped tests.b.test_four: lspci (pciutils) is not installed'
            in proc.stdout)
    # A failure is named with its message on one line.
    assert ('failed tests.b.test_three: AssertionError: seed 42 failed '
            'after 7 operations in op_boot\n' in proc.stdout)
    # A testtools report: its traceback's last exception, not its logs.
    assert ("failed tests.c.test_five: testtools.matchers._impl."
            "MismatchError: [] != ['resize']: seed 720931271 never did "
            "these\n" in proc.stdout)
    # pytest's own prefix on the placeholder changes nothing.
    assert ('failed tests.c.test_six: AssertionError: seed 1521868497 '
            'failed after 12 operations in op_boot\n' in proc.stdout)
    assert proc.stdout.endswith('total: 2 passed, 3 failed, 1 skipped\n')


def test_no_skips_fails_a_run_with_a_skip(tmp_path):
    proc = run(tmp_path, '--no-skips')
    assert proc.returncode == 1
    assert '1 tests skipped where nothing should be' in proc.stdout
    assert run(tmp_path, '--no-skips', skipped=False).returncode == 0


def test_a_missing_report_fails(tmp_path):
    proc = subprocess.run([sys.executable, TOOL, str(tmp_path / 'none.xml')],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and 'no report' in proc.stdout
