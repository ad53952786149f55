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

"""Shared pytest fixtures: fake hosts built from host profiles."""

import os

import pytest

from cyborg_drivers.fake import hosttree


@pytest.fixture
def host_tree(tmp_path):
    """Build a host profile (name, path or dict) as a sysfs tree; its root.

    Call it more than once for several hosts in one test.
    """
    count = 0

    def build(profile):
        nonlocal count
        count += 1
        if isinstance(profile, str) and profile in hosttree.PROFILE_NAMES:
            profile = hosttree.profile_path(profile)
        root = os.path.join(str(tmp_path), 'host%d' % count, 'sys')
        hosttree.build_tree(profile, root)
        return root
    return build


def pytest_terminal_summary(terminalreporter):
    from tests import counts
    if counts.LINES:
        terminalreporter.section('inputs tried, faults injected')
        for line in counts.LINES:
            terminalreporter.write_line(line)
