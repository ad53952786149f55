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

"""What the scripts run under ``umockdev-wrapper`` share.

umockdev works by LD_PRELOAD, which has to be in place when the process
starts, so the tests that need it run a worker script in a subprocess
under ``umockdev-wrapper`` (tests/functional/udev/udev_worker.py,
tests/functional/agent/udev_fence_worker.py and aer_fence_worker.py).
Such a worker prints one JSON object on stdout; exit status
:data:`SKIP_STATUS` with ``{"skip": reason}`` means a dependency is
missing.

Only the standard library is imported here: a worker makes its testbed
before anything creates a udev monitor.
"""

import json
import os
import sys

#: A worker's exit status when a dependency is missing.
SKIP_STATUS = 77


def skip(reason):
    """Print ``{"skip": reason}`` and exit with :data:`SKIP_STATUS`."""
    print(json.dumps({'skip': reason}))
    sys.exit(SKIP_STATUS)


def testbed():
    """A new UMockdev Testbed; skips when umockdev or pyudev is missing."""
    try:
        import gi
    except ImportError as e:
        skip('PyGObject (gi) not importable (%s)' % e)
    try:
        gi.require_version('UMockdev', '1.0')
        from gi.repository import UMockdev
    except (ImportError, ValueError) as e:
        skip('UMockdev typelib not available (%s); install Debian '
             'package gir1.2-umockdev-1.0' % e)
    # UMockdev.in_mock_environment() says False even under the wrapper
    # (umockdev 0.17); the wrapper's doing is LD_PRELOAD.
    if 'libumockdev-preload' not in os.environ.get('LD_PRELOAD', ''):
        # Not a skip: without the preload a worker would emit nothing
        # and watch the real host.
        sys.exit('not running under umockdev-wrapper (no '
                 'libumockdev-preload in LD_PRELOAD)')
    # Before any udev monitor exists: a monitor created earlier never
    # hears the testbed's uevents.
    bed = UMockdev.Testbed.new()
    try:
        import pyudev
        pyudev.Context()
    except (ImportError, OSError) as e:
        skip('pyudev/libudev not usable (%s)' % e)
    return bed
