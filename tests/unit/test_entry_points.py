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

"""Every entry point the distribution declares resolves to its object."""

from importlib import metadata
import os
import subprocess
import sys

import pytest

from cyborg_drivers import base

DIST = metadata.distribution('cyborg-nova')
ENTRY_POINTS = sorted(DIST.entry_points, key=lambda e: (e.group, e.name))
GROUPS = {ep.group for ep in ENTRY_POINTS}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def test_expected_namespaces_declared():
    assert {'console_scripts', 'cyborg_nova.drivers', 'cyborg_nova.cli',
            'oslo.config.opts'} <= GROUPS


@pytest.mark.parametrize('entry_point', ENTRY_POINTS,
                         ids=lambda e: '%s:%s' % (e.group, e.name))
def test_entry_point_resolves(entry_point):
    obj = entry_point.load()
    assert obj is not None
    if entry_point.group == 'cyborg_nova.drivers':
        assert issubclass(obj, base.AcceleratorDriver)
        assert obj.name == entry_point.name
        assert obj.description
    if entry_point.group == 'oslo.config.opts':
        groups = {getattr(group, 'name', group) for group, _ in obj()}
        assert {'cyborg_nova', 'cyborg_generic', 'cyborg_nic_sriov',
                'cyborg_nvidia_gpu'} <= groups


def test_driver_contract_documents_raises():
    for name in ('discover', 'health', 'program'):
        doc = getattr(base.AcceleratorDriver, name).__doc__
        assert ':raises' in doc, name
    # driver-install and driver-uninstall change no device: no driver
    # step runs then (the VF count is driver-update's).
    assert not hasattr(base.AcceleratorDriver, 'setup')
    assert not hasattr(base.AcceleratorDriver, 'teardown')


@pytest.mark.parametrize('service, entry', [
    ('cyborg_nova.agent.service', 'cyborg_nova.cmd.agent'),
    ('cyborg_nova.conductor.service', 'cyborg_nova.cmd.conductor'),
])
def test_a_service_module_run_directly_names_its_entry(service, entry):
    # The process's main() is in cmd/ (the edges); the service module
    # must not silently do nothing when run as it used to be.
    proc = subprocess.run([sys.executable, '-W', 'ignore', '-m', service],
                          capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 1
    assert 'python -m %s' % entry in proc.stderr
