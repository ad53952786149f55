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
