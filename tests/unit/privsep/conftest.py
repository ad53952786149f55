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

"""Fixtures of the privileged modules' unit tests."""

import os

from oslo_config import cfg
from oslo_config import fixture as cfg_fixture
import pytest

from cyborg_nova.conf import privsep as privsep_conf
import privsep
from privsep import _common
from tests.unit.privsep import fakesysfs


@pytest.fixture
def tree(tmp_path):
    """The gpu-host profile as a sysfs tree with vfio-pci loaded."""
    return fakesysfs.build(str(tmp_path / 'sys'))


@pytest.fixture
def nic_tree(tmp_path):
    """The crypto-nic-host profile (QAT and E810 PFs) as a sysfs tree."""
    return fakesysfs.build(str(tmp_path / 'nic-sys'),
                           fakesysfs.CRYPTO_NIC_HOST)


def _recorder(monkeypatch, tree):
    done = []
    real = _common.write_attr

    def record(path, value):
        done.append((os.path.relpath(path, tree), value))
        real(path, value)
    monkeypatch.setattr(_common, 'write_attr', record)
    return done


@pytest.fixture
def writes(monkeypatch, tree):
    """Every sysfs write, in order, as (path below the tree, value).

    A fake tree keeps only the last value of a file; the order of writes
    (override before probe, 0 before a new VF count) is what the kernel
    needs, so it is recorded here while the real write still happens.
    """
    return _recorder(monkeypatch, tree)


@pytest.fixture
def nic_writes(monkeypatch, nic_tree):
    """As ``writes``, on ``nic_tree``."""
    return _recorder(monkeypatch, nic_tree)


@pytest.fixture
def daemon_conf(tree):
    """Entrypoints run in this process, configured as a daemon would be.

    The sysfs root comes from ``[cyborg_nova_privsep] sysfs_root`` of the
    global configuration, as in the daemon; client mode is off, so the
    decorated functions run here instead of being sent to a daemon.
    """
    privsep_conf.register_opts(cfg.CONF)
    fixture = cfg_fixture.Config(cfg.CONF)
    fixture.setUp()
    fixture.config(sysfs_root=tree, group=privsep_conf.GROUP.name)
    contexts = (privsep.sysfs_admin, privsep.nova_config)
    for context in contexts:
        context.set_client_mode(False)
    yield fixture
    for context in contexts:
        context.set_client_mode(True)
    fixture.cleanUp()
