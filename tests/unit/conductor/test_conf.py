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

"""The conductor-lite's options."""

from oslo_config import cfg

from cyborg_nova.conf import conductor as conductor_conf


def test_defaults():
    conf = cfg.ConfigOpts()
    conductor_conf.register_opts(conf)
    conf([])
    opts = conf.cyborg_conductor
    assert opts.bind_port is None
    assert opts.bind_host == '127.0.0.1'
    assert opts.agent_down_time == 60
    assert opts.agent_timeout == 5.0
    assert opts.agent_token is None
    assert conf.database.connection == conductor_conf.DEFAULT_CONNECTION
    assert conductor_conf.DEFAULT_PORT == 6667
    # [placement] is registered and, unset, means "no Placement".
    assert conf.placement.auth_type is None


def test_list_opts_documents_every_option():
    (group, opts), = conductor_conf.list_opts().items()
    assert group.name == 'cyborg_conductor'
    names = {opt.name for opt in opts}
    assert {'bind_host', 'bind_port', 'admin_token', 'agent_down_time',
            'agent_token', 'agent_timeout', 'agent_ca_file'} <= names
    secret = {opt.name for opt in opts if opt.secret}
    assert {'agent_token', 'admin_token', 'reader_token'} <= secret
    for opt in conductor_conf.OPTS:
        assert 'Default' in opt.help or 'default' in opt.help, opt.name
        assert 'Related options' in opt.help, opt.name
