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

"""How long the fuzz tests run: a short CI mode, a longer one on demand.

Each fuzz target has a default number of examples small enough for CI.
``CYBORG_NOVA_FUZZ_EXAMPLES=N`` runs every target with ``N`` examples
instead (and the REST API fuzzers with ``N`` per operation and
generation mode)::

    CYBORG_NOVA_FUZZ_EXAMPLES=5000 .venv/bin/python -m pytest -s \\
        tests/unit/fuzz tests/functional/agent/test_schemathesis.py \\
        tests/functional/conductor/test_schemathesis.py

Every target reports how many inputs it tried: pytest's summary lists
them (:mod:`tests.counts`).
"""

import os
import sys

import hypothesis

from tests import counts

ENV = 'CYBORG_NOVA_FUZZ_EXAMPLES'


def examples(default: int) -> int:
    """The examples a target runs: ``default``, or the environment's."""
    value = os.environ.get(ENV, '').strip()
    if not value:
        return default
    count = int(value)
    if count < 1:
        raise ValueError('%s must be a positive number, not %r'
                         % (ENV, value))
    return count


def settings(default: int, **kwargs) -> hypothesis.settings:
    """hypothesis settings for a fuzz target of ``default`` examples.

    No deadline (the machine is shared, timings vary), no example
    database (a CI run starts clean; hypothesis prints how to reproduce a
    failure), every health check that is about speed off.
    """
    kwargs.setdefault('suppress_health_check', [
        hypothesis.HealthCheck.too_slow,
        hypothesis.HealthCheck.data_too_large,
        hypothesis.HealthCheck.large_base_example,
        hypothesis.HealthCheck.function_scoped_fixture])
    return hypothesis.settings(
        max_examples=examples(default), deadline=None, database=None,
        **kwargs)


def report(target: str, tried: int, **details) -> str:
    """Report (and return) one line: the target and the inputs tried."""
    extra = ''.join(', %s: %s' % item for item in sorted(details.items()))
    return counts.record('fuzz %s: %d inputs tried, no crash%s'
                         % (target, tried, extra))


# -- what a call wrote ---------------------------------------------------

_WRITE_FLAGS = (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC
                | os.O_APPEND)
_CHANGES = {'os.rename', 'os.remove', 'os.rmdir', 'os.mkdir', 'os.symlink',
            'os.link', 'os.chmod', 'os.chown', 'os.truncate', 'os.utime',
            'shutil.rmtree', 'shutil.move', 'subprocess.Popen', 'os.exec',
            'os.posix_spawn', 'os.spawn', 'os.system', 'os.fork'}
_recorders: list = []


def _audit(event, args):
    if not _recorders:
        return
    if event == 'open':
        path, mode, flags = (tuple(args) + (None, None))[:3]
        writes = (isinstance(mode, str) and any(c in mode for c in 'wax+')
                  ) or (isinstance(flags, int) and flags & _WRITE_FLAGS)
        if writes:
            _recorders[-1].append((event, path))
    elif event in _CHANGES:
        _recorders[-1].append((event, args[0] if args else None))


sys.addaudithook(_audit)


class Changes:
    """What calls inside ``with Changes() as changes:`` changed.

    Every file written, changed or created and every process started, in
    ``changes.events``: from Python's audit events, so independent of the
    code under test.
    """

    def __enter__(self):
        self.events = []
        _recorders.append(self.events)
        return self

    def __exit__(self, *exc):
        _recorders.remove(self.events)
        return False
