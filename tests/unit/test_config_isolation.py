"""Each ConfigOpts has options of its own.

oslo.config copies a registered group shallowly: registering one
module-level group object in two ConfigOpts made them share their
options, so a token overridden in one (a test's, a tool's) was the
other's too.
"""

from oslo_config import cfg
import pytest

from cyborg_nova.conf import agent
from cyborg_nova.conf import conductor
from cyborg_nova.conf import cyborg_nova
from cyborg_nova.conf import privsep


@pytest.mark.parametrize('module, group, option, value', [
    (agent, 'cyborg_agent', 'admin_token', 'secret-a'),
    (conductor, 'cyborg_conductor', 'agent_token', 'secret-c'),
    (cyborg_nova, 'cyborg_nova', 'sysfs_root', '/elsewhere'),
    (privsep, 'cyborg_nova_privsep', 'sysfs_root', '/elsewhere'),
])
def test_overrides_stay_in_their_config(module, group, option, value):
    first, second = cfg.ConfigOpts(), cfg.ConfigOpts()
    for conf in (first, second):
        module.register_opts(conf)
        conf([])
    default = second[group][option]
    first.set_override(option, value, group)
    assert first[group][option] == value
    assert second[group][option] == default != value
