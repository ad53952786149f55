"""The documentation and the release notes build with warnings as errors
(what ``tox -e docs`` and ``tox -e releasenotes`` run).
"""

import os
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
