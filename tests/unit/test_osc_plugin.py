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

"""``openstack cyborg-nova ...``: the same commands as ``cyborg-nova``.

Read from this tree's setup.cfg, like test_command_names.
"""

import argparse
import configparser
import os
import types

from cyborg_nova.cmd import hostargs
from cyborg_nova.cmd import osc
from tests.unit import test_command_names

#: The command group ``openstack`` loads for the plugin.
GROUP = 'openstack.%s.v%s' % (osc.API_NAME, osc.DEFAULT_API_VERSION)


def current() -> dict:
    """The non-deprecated ``cyborg-nova`` commands."""
    return {name: cls for name, cls in test_command_names.commands().items()
            if not cls.deprecated}


def test_every_command_has_its_openstack_name_and_no_other():
    expected = {'cyborg-nova ' + name.replace('-', ' '): cls
                for name, cls in current().items()}
    assert test_command_names.commands(GROUP) == expected


def test_the_plugin_is_registered_under_one_group():
    parser = configparser.ConfigParser()
    parser.read(os.path.join(test_command_names.TOP, 'setup.cfg'))
    assert parser['entry_points']['openstack.cli.extension'].split() == [
        osc.API_NAME, '=', osc.__name__]
    assert GROUP == 'openstack.cyborg_nova.v1'
    assert osc.DEFAULT_API_VERSION in osc.API_VERSIONS
    assert osc.API_VERSION_OPTION == 'os_%s_api_version' % osc.API_NAME


def test_no_command_asks_openstack_for_a_cloud_login():
    for name, cls in current().items():
        assert issubclass(cls, hostargs.HostCommand), name
        assert cls.auth_required is False, name


def test_the_config_option_is_repeatable():
    parser = osc.build_option_parser(argparse.ArgumentParser())
    assert parser.parse_args([]).cyborg_nova_config_file == []
    assert parser.parse_args(
        ['--cyborg-nova-config-file', 'a.conf',
         '--cyborg-nova-config-file', 'b.conf']
    ).cyborg_nova_config_file == ['a.conf', 'b.conf']


def _manager(files):
    """openstackclient's ClientManager, as far as make_client reads it."""
    return types.SimpleNamespace(_cli_options=types.SimpleNamespace(
        config={osc.CONFIG_OPTION: files}))


def test_make_client_reads_the_files_given(tmp_path):
    first, second = tmp_path / 'a.conf', tmp_path / 'b.conf'
    first.write_text('[cyborg_nova]\nsysfs_root = /a\nstate_path = /a.db\n')
    second.write_text('[cyborg_nova]\nsysfs_root = /b\n')
    conf = osc.make_client(_manager([str(first), str(second)]))
    assert conf.cyborg_nova.sysfs_root == '/b'
    assert conf.cyborg_nova.state_path == '/a.db'


def test_a_command_reads_the_config_of_either_app(tmp_path):
    conf = osc.make_client(_manager([]))
    # cyborg-nova: the app's own conf.
    assert hostargs.conf(types.SimpleNamespace(conf=conf)) is conf
    # openstack: no conf on the app; the plugin's client is the config.
    shell = types.SimpleNamespace(
        client_manager=types.SimpleNamespace(cyborg_nova=conf))
    assert hostargs.conf(shell) is conf
