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
@pytest.mark.parametrize('parse_first', [True, False])
def test_overrides_stay_in_their_config(module, group, option, value,
                                        parse_first):
    first, second = cfg.ConfigOpts(), cfg.ConfigOpts()
    for conf in (first, second):
        # Both orders happen: the privsep daemon registers its options
        # after privsep-helper parsed the command line.
        if parse_first:
            conf([])
        module.register_opts(conf)
        if not parse_first:
            conf([])
    first.set_override(option, value, group)
    # (Read only now: a ConfigOpts caches what was read.)
    assert first[group][option] == value
    assert second[group][option] != value
