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

"""The fake driver: a host profile's accelerators through the real drivers."""

import os

from oslo_config import cfg
import pytest

from cyborg_drivers import base
from cyborg_drivers import discovery
from cyborg_drivers import loader
from cyborg_nova import conf as cn_conf


def fake(tmp_path, **overrides):
    conf = cfg.ConfigOpts()
    conf([])
    cn_conf.register_opts(conf)
    conf.set_override('state_path', str(tmp_path / 'state.sqlite'),
                      group='cyborg_nova')
    (driver,) = loader.load(conf, ['fake'])
    for name, value in overrides.items():
        conf.set_override(name, value, group='cyborg_fake')
    return driver


def test_unconfigured_reports_nothing(tmp_path, host_tree):
    driver = fake(tmp_path)
    assert not driver.is_configured()
    result = discovery.Discoverer([driver], host_tree('gpu-host')).discover()
    assert result.accelerators == ()


def test_profile_by_name(tmp_path, host_tree):
    driver = fake(tmp_path, host_profile='fpga-host')
    # The host's own bus (here another profile) is not what it reports.
    result = discovery.Discoverer([driver], host_tree('gpu-host')).discover()
    assert [(a.address, a.driver, a.resource_class)
            for a in result.accelerators] == [
        ('0000:5e:00.0', 'fake', 'FPGA'),
        ('0000:af:00.0', 'fake', 'FPGA'),
        ('0000:d8:00.0', 'fake', 'FPGA')]
    assert ('emulates', 'intel_fpga') in result.accelerators[0].capabilities
    assert os.path.isdir(tmp_path / 'fake-sysfs' / 'fpga-host' / 'bus')


def test_tree_kept_until_profile_changes(tmp_path, host_tree):
    profile = tmp_path / 'host.yaml'
    profile.write_text(
        'name: one\ndevices:\n'
        '  - {address: "0000:3b:00.0", vendor: 0x10de, device: 0x1eb8,\n'
        '     class: 0x030200, driver: nvidia}\n')
    tree = tmp_path / 'tree'
    driver = fake(tmp_path, host_profile=str(profile), tree_path=str(tree))
    root = driver.ensure_tree()
    marker = tree / 'marker'
    marker.write_text('state a later step wrote into the fake hardware')
    assert driver.ensure_tree() == root
    assert marker.exists()
    profile.write_text(profile.read_text().replace('0x1eb8', '0x2236'))
    driver.ensure_tree()
    assert not marker.exists()
    (gpu,) = driver.discover(None)
    assert gpu.product_id == '2236'


def test_bad_profile_is_a_driver_error(tmp_path):
    profile = tmp_path / 'bad.yaml'
    profile.write_text('name: bad\ndevices:\n  - {address: nonsense}\n')
    driver = fake(tmp_path, host_profile=str(profile))
    with pytest.raises(base.DriverError) as exc:
        driver.ensure_tree()
    assert 'host_profile' in str(exc.value)
    missing = fake(tmp_path, host_profile=str(tmp_path / 'nope.yaml'))
    with pytest.raises(base.DriverError):
        missing.ensure_tree()
