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
