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

"""The config reference lists every option the code registers.

The reference (and the sample) come from the ``oslo.config.opts`` entry
point; the services register their options themselves.
"""

from importlib import metadata

from oslo_config import cfg

from cyborg_drivers import loader
from cyborg_nova import conf as cn_conf
from cyborg_nova.conf import agent
from cyborg_nova.conf import conductor
from cyborg_nova.conf import privsep as privsep_conf

# Groups that belong to libraries; they document their own options.
LIBRARY_GROUPS = {'placement', 'database', 'keystone_authtoken',
                  'oslo_messaging_notifications', 'oslo_policy'}


def registered():
    conf = cfg.ConfigOpts()
    cn_conf.register_opts(conf)
    agent.register_opts(conf)
    conductor.register_opts(conf)
    privsep_conf.register_opts(conf)
    loader.register_opts(conf, list(loader.installed().values()))
    found = set()
    for group_name, group in conf.items():
        if not isinstance(group, cfg.ConfigOpts.GroupAttr):
            continue
        if group_name in LIBRARY_GROUPS:
            continue
        for name in group:
            found.add((group_name, name))
    return found


def documented():
    (entry_point,) = [ep for ep in metadata.entry_points(
        group='oslo.config.opts') if ep.name == 'cyborg_nova']
    found = set()
    for group, opts in entry_point.load()():
        group_name = getattr(group, 'name', group)
        for opt in opts:
            found.add((group_name, opt.dest))
    return found


def test_every_registered_option_is_in_the_reference():
    ours = registered()
    # The project's own groups, each with its options: not a vacuous set.
    groups = {g for g, _ in ours}
    assert groups >= {'cyborg_nova', 'cyborg_agent', 'cyborg_conductor',
                      'cyborg_generic', 'cyborg_nova_privsep'}
    missing = ours - documented()
    assert not missing, 'options not in the reference: %s' % sorted(missing)


def test_reference_has_nothing_the_code_does_not_register():
    extra = documented() - registered()
    assert not extra, 'documented but never registered: %s' % sorted(extra)


def test_every_option_has_help():
    (entry_point,) = [ep for ep in metadata.entry_points(
        group='oslo.config.opts') if ep.name == 'cyborg_nova']
    for group, opts in entry_point.load()():
        for opt in opts:
            assert opt.help and len(opt.help.strip()) > 10, (
                '[%s] %s has no help' % (getattr(group, 'name', group),
                                         opt.dest))
