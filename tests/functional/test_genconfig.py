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

"""The sample config (tox -e genconfig) covers every option group."""

import os
import subprocess
import sys

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def test_generator_writes_every_group(tmp_path):
    out = tmp_path / 'sample.conf'
    proc = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable),
                      'oslo-config-generator'),
         '--config-file',
         os.path.join(TOP, 'etc', 'oslo-config-generator',
                      'cyborg-nova.conf'),
         '--output-file', str(out)],
        capture_output=True, text=True, cwd=TOP, timeout=60)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    for group in ('cyborg_nova', 'cyborg_generic', 'cyborg_nic_sriov',
                  'cyborg_nvidia_gpu', 'cyborg_fake', 'cyborg_agent',
                  'cyborg_conductor', 'cyborg_nova_privsep'):
        assert '[%s]' % group in text
    for option in ('#enabled_drivers = nvidia_gpu,intel_fpga,xilinx_fpga,'
                   'intel_qat', '#sysfs_root = /sys', '#auto_ready = false',
                   '#physical_device_mappings =', '#device_spec ='):
        assert option in text


def test_sample_policy_file_covers_every_rule():
    proc = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable),
                      'oslopolicy-sample-generator'),
         '--namespace', 'cyborg_nova'],
        capture_output=True, text=True, cwd=TOP, timeout=60)
    assert proc.returncode == 0, proc.stderr
    for rule in ('cyborg_nova:agent:discovery', 'cyborg_nova:agent:hello',
                 'cyborg_nova:conductor:agents',
                 'cyborg_nova:conductor:hello'):
        assert '"%s"' % rule in proc.stdout
    assert '#"cyborg_nova:agent:discovery": "role:admin"' in proc.stdout
