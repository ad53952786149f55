"""The committed REST API documents match what the services serve."""

import os
import subprocess
import sys

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def test_openapi_documents_are_current():
    proc = subprocess.run(
        [sys.executable, os.path.join(TOP, 'tools', 'openapi_docs.py'),
         '--check'], capture_output=True, text=True, cwd=TOP, timeout=120)
    assert proc.returncode == 0, (
        'doc/source/api/*-openapi.json are stale: run '
        'tools/openapi_docs.py\n' + proc.stdout + proc.stderr)
