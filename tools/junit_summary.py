"""Add up JUnit XML reports into one closing line.

Usage: python tools/junit_summary.py REPORT.xml [...]
Prints each suite's counts, then ``total: N passed, N failed, N skipped``
(errors count as failed). Exit 1 if a report is missing or unreadable.
"""

import sys
import xml.etree.ElementTree as ET


def counts(path):
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == 'testsuite' else root.iter('testsuite')
    tests = failed = skipped = 0
    for suite in suites:
        tests += int(suite.get('tests', 0))
        failed += int(suite.get('failures', 0)) + int(suite.get('errors', 0))
        skipped += int(suite.get('skipped', 0))
    return tests - failed - skipped, failed, skipped


def main(paths):
    total = [0, 0, 0]
    ok = True
    for path in paths:
        try:
            passed, failed, skipped = counts(path)
        except (OSError, ET.ParseError) as exc:
            print('%s: no report (%s)' % (path, exc))
            ok = False
            continue
        print('%s: %d passed, %d failed, %d skipped'
              % (path.rsplit('/', 1)[-1], passed, failed, skipped))
        total = [total[0] + passed, total[1] + failed, total[2] + skipped]
    print('total: %d passed, %d failed, %d skipped' % tuple(total))
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
