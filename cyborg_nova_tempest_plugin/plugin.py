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

"""The Tempest plugin: where the tests are and which options they read.

Registered in ``setup.cfg``::

    [entry_points]
    tempest.test_plugins =
        cyborg_nova = cyborg_nova_tempest_plugin.plugin:CyborgNovaTempestPlugin
"""

import os

from tempest.test_discover import plugins

from cyborg_nova_tempest_plugin import config as plugin_config


class CyborgNovaTempestPlugin(plugins.TempestPlugin):
    """cyborg-nova's tests, options and (no) service clients for Tempest."""

    def load_tests(self):
        """The test directory and the top-level directory of its imports.

        :return: ``(test_dir, top_level_dir)``, as
            ``unittest.TestLoader.discover`` takes them.
        """
        here = os.path.dirname(os.path.abspath(__file__))
        test_dir = os.path.join(here, 'tests')
        top_level_dir = os.path.dirname(here)
        return test_dir, top_level_dir

    def register_opts(self, conf):
        """Add ``[accelerators]`` and ``[service_available] cyborg_nova``.

        :param conf: Tempest's ``oslo_config.cfg.ConfigOpts``.
        """
        plugin_config.register_opts(conf)

    def get_opt_lists(self):
        """The plugin's options by group, for the sample config."""
        return plugin_config.list_opts()

    def get_service_clients(self):
        """None: the conductor-lite is not in the Keystone catalog.

        Tests build :class:`~cyborg_nova_tempest_plugin.services.
        conductor_client.ConductorClient` from ``[accelerators]``.
        """
        return []
