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

"""A real Placement for the programming tests, and hosts reported to it."""

import threading

import pytest

from tests.functional import placement_fixture
from tests.functional.programming import base


def start_placement() -> placement_fixture.PlacementServer:
    """tools/placement_server.py, its stdout drained.

    Placement logs every request to stdout (oslo.log without a log
    file); unread, the pipe fills after a few hundred requests and the
    single-threaded server blocks in the middle of one.
    """
    server = placement_fixture.PlacementServer()
    server.setUp()
    threading.Thread(target=lambda: [None for _ in server.proc.stdout],
                     daemon=True, name='placement-stdout').start()
    return server


@pytest.fixture(scope='session')
def placement():
    server = start_placement()
    yield server
    server.cleanUp()


@pytest.fixture
def host(placement, tmp_path):
    """fpga-host, reported once (every device ready, unfenced)."""
    host = base.Host(str(tmp_path), placement.endpoint)
    host.report()
    return host
