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

"""Shared pytest fixtures: fake hosts built from host profiles; databases."""

import os

import pytest

from cyborg_drivers.fake import hosttree
from tests import dbservers

# Captured sysfs trees are data, with sysfs's own links (a device's
# ``subsystem`` leads back to its bus, and the bus to the device):
# collection must not walk into them.
collect_ignore = ['captures']


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


@pytest.fixture(scope='session')
def db_pool():
    """Private MariaDB and PostgreSQL servers, started when first used."""
    pool = dbservers.Pool()
    yield pool
    from tests import counts
    for server in pool.servers.values():
        counts.LINES.append(server.summary())
    pool.stop()
    for backend in sorted(pool.missing):
        counts.LINES.append('%s tests skipped: %s'
                            % (backend, pool.missing[backend]))


@pytest.fixture(params=dbservers.BACKENDS)
def db_url(request, tmp_path):
    """The URL of a fresh, empty database, on each backend in turn.

    SQLite: a file in a directory not created yet. MariaDB, PostgreSQL:
    a new database on the session's private server, dropped afterwards.
    """
    with dbservers.database(request, request.param, tmp_path) as url:
        yield url


def pytest_terminal_summary(terminalreporter):
    from tests import counts
    if counts.LINES:
        terminalreporter.section('inputs tried, faults injected')
        for line in counts.LINES:
            terminalreporter.write_line(line)
