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

"""A host, its Placement and its agent, shared by the agent tests.

The fpga-host profile is built as a sysfs tree, reported to a real
Placement by tools/report_host.py (the resource tracker's code path), and
a real cyborg-nova-agent process is started on it with the same state
store, as on a compute host next to nova-compute.
"""

import os

from oslo_config import cfg
import pytest

from cyborg_drivers import discovery
from cyborg_drivers.fake import hosttree
from cyborg_drivers import loader
from cyborg_nova.conf import cyborg_nova as cn_opts
from tests.functional.agent import base
from tests.functional import placement_fixture


@pytest.fixture(scope='session')
def placement():
    server = placement_fixture.PlacementServer()
    server.setUp()
    yield server
    server.cleanUp()


class Host:
    """A fake compute host: tree, state store, Placement and agent."""

    def __init__(self, directory: str, placement_endpoint: str) -> None:
        self.directory = directory
        self.sysfs_root = os.path.join(directory, 'sys')
        self.state_path = os.path.join(directory, 'state.sqlite')
        self.placement = base.Placement(placement_endpoint)
        hosttree.build_tree('fpga-host', self.sysfs_root)
        self.expected = discover(self.sysfs_root)
        base.report_host(placement_endpoint, base.NODENAME,
                         self.sysfs_root, self.state_path)
        self.agent = base.AgentProcess(directory, {
            'cyborg_agent': {
                # Discovery only on request: the tests show that
                # POST /discovery, not a timer, brings changes in.
                'discovery_interval': '0',
                'driver_poll_interval': '1',
                'driver_failure_threshold': '2',
            },
            'cyborg_nova': {'sysfs_root': self.sysfs_root,
                            'state_path': self.state_path,
                            'auto_ready': 'True'},
            'placement': {'auth_type': 'admin_token',
                          'endpoint': placement_endpoint,
                          'token': 'admin'},
            # Lifecycle notifications into the agent's log.
            'oslo_messaging_notifications': {'driver': 'log'},
        })

    def device_link(self, address: str) -> str:
        return os.path.join(self.sysfs_root, 'bus', 'pci', 'devices',
                            address)


def discover(sysfs_root: str) -> list[str]:
    """Addresses the default drivers find in the tree, in-process."""
    conf = cfg.ConfigOpts()
    conf([])
    cn_opts.register_opts(conf)
    drivers = loader.load(conf, conf.cyborg_nova.enabled_drivers)
    found = discovery.Discoverer(drivers, sysfs_root).discover()
    return [a.address for a in found.accelerators]


@pytest.fixture(scope='session')
def host(placement, tmp_path_factory):
    host = Host(str(tmp_path_factory.mktemp('host')), placement.endpoint)
    host.agent.setUp()
    yield host
    host.agent.cleanUp()
