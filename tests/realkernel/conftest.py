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

"""Fixtures of the in-L1 tests."""

from oslo_config import cfg
import pytest

from cyborg_nova import privileged
from tests.realkernel import l1


@pytest.fixture(scope='session')
def pci():
    """privsep.pci, its calls going to a privsep-helper daemon.

    The daemon is started from the host's config (its
    ``helper_command``), as nova-compute or the CLI starts it.
    """
    conf = cfg.ConfigOpts()
    conf(['--config-file', l1.host()])
    context = privileged.start_privsep(conf, 'sysfs_admin')
    import privsep.pci
    yield privsep.pci
    if context.channel is not None:
        context.stop()
