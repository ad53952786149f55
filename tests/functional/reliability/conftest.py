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

"""Fixtures of the reliability tests: a Placement they may kill."""

import pytest

from tests.functional.libvirt import conftest as libvirt_conftest
# The libvirt tests' real libvirtd and instances, for attach tests.
from tests.functional.libvirt.conftest import domains  # noqa: F401
from tests.functional.libvirt.conftest import libvirtd  # noqa: F401
from tests.functional.programming import base
from tests.functional.reliability import placement as placement_mod


@pytest.fixture(scope='module')
def placement(tmp_path_factory):
    server = placement_mod.Placement(
        str(tmp_path_factory.mktemp('placement'))).start()
    yield server
    server.kill()


@pytest.fixture
def live_placement(placement):
    """The module's Placement, running at the start and end of the test.

    At the end its database must pass SQLite's integrity check, however
    often the test killed it.
    """
    placement.ensure_running()
    yield placement
    placement.ensure_running()
    assert placement.integrity() == 'ok'


@pytest.fixture
def host(live_placement, tmp_path):
    """fpga-host (two PACs, one Alveo), reported once."""
    host = base.Host(str(tmp_path), live_placement.endpoint)
    host.report()
    return host


@pytest.fixture(scope='module')
def qat_host(placement, tmp_path_factory):
    """crypto-nic-host (intel_qat), reported to the module's Placement.

    The libvirt tests' host: one per Placement (its nodename is fixed).
    """
    placement.ensure_running()
    return libvirt_conftest.Host(tmp_path_factory.mktemp('qat-host'),
                                 placement)
