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

"""The console scripts run as an operator runs them, in a subprocess."""

import os
import subprocess
import sys

#: Where the console scripts of this environment are.
BIN = os.path.dirname(sys.executable)
CLI = os.path.join(BIN, 'cyborg-nova')


def run(script, *args, env=None, timeout=60):
    """``script`` (a console script's name) with ``args``.

    :returns: (exit status, stdout, stderr).
    """
    proc = subprocess.run([os.path.join(BIN, script)] + list(args),
                          capture_output=True, text=True, env=env,
                          timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def cli(*args, config=None):
    """``cyborg-nova [--config-file config] args``; as :func:`run`."""
    argv = ['--config-file', config] if config else []
    return run('cyborg-nova', *argv, *args)
