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

"""The README's demo runs to the end and shows what it promises."""

import os
import subprocess
import sys

TOOLS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), 'tools')


def test_demo_runs():
    env = {k: v for k, v in os.environ.items() if not k.startswith('OS_')}
    proc = subprocess.run(
        [sys.executable, os.path.join(TOOLS, 'demo.py'), '--no-wait'],
        capture_output=True, text=True, timeout=600, env=env,
        stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    # Discovery of the sample host: accelerators, not the noise.
    assert 'CUSTOM_FPGA_INTEL_PAC_N3000' in out
    assert '| 0000:d8:00.0 | 8086      | 37c8' in out
    # Reported to a real Placement and shown as a tree.
    assert 'demo-compute_accelerator_0000:3c:00.0' in out
    assert ('flavor fpga.intel (resources:FPGA=1 '
            'trait:CUSTOM_FPGA_INTEL=required): 2 candidate(s)') in out
    assert 'flavor gpu.t4x3 (resources:PGPU=3): 0 candidate(s)' in out
    # The openstack CLI, as an operator would type it, sees them too.
    assert 'export OS_AUTH_TYPE=admin_token OS_TOKEN=admin' in out
    listing = out.split('openstack resource provider list\n', 1)[1]
    assert 'demo-compute_accelerator_0000:d8:00.0' in listing
    assert 'demo-compute_accelerator_0000:5e:00.0' in listing
    assert ('flavor nic.physnet1 (resources:CUSTOM_NIC=1 '
            'trait:CUSTOM_PHYSNET1=required): 1 candidate(s)') in out
    # It says that it trusts its devices, and where to go from here.
    assert 'with [cyborg_nova] auto_ready = True (in ' in out
    conf = out.split('auto_ready = True (in ', 1)[1].split(')', 1)[0]
    with open(conf) as f:
        assert 'auto_ready = True' in f.read()
    nxt = out.split('== What next', 1)[1]
    assert os.path.dirname(sys.executable) in nxt
    assert 'doc/source/install.rst' in nxt


def test_printed_openstack_lines_run_in_a_fresh_shell():
    """The lines the demo prints, pasted into a shell with no venv."""
    env = {k: v for k, v in os.environ.items() if not k.startswith('OS_')}
    proc = subprocess.Popen(
        [sys.executable, os.path.join(TOOLS, 'demo.py'), '--hold'],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line.rstrip('\n'))
            if line.startswith('Placement stays up'):
                break
        out = '\n'.join(lines)
        assert 'Press Enter' in out, out[-3000:]
        block = out.split('== The same providers with the openstack CLI',
                          1)[1].split('\n\n', 2)[1]
        printed = [line.strip() for line in block.splitlines()]
        assert printed[0].startswith('export OS_AUTH_TYPE=admin_token ')
        assert len(printed) == 3, printed
        # A fresh login shell's environment: no venv, no OS_* variables.
        fresh = {'PATH': '/usr/local/bin:/usr/bin:/bin',
                 'HOME': os.environ.get('HOME', '/root'), 'LANG': 'C.UTF-8'}
        shell = subprocess.run(
            ['bash', '--noprofile', '--norc', '-e', '-c',
             '\n'.join(printed)], capture_output=True, text=True,
            env=fresh, timeout=120)
        assert shell.returncode == 0, shell.stdout + shell.stderr
        assert 'demo-compute_accelerator_0000:d8:00.0' in shell.stdout
        # The candidate list: both Intel FPGAs' providers.
        assert shell.stdout.count('FPGA=1') == 2, shell.stdout
    finally:
        # Enter stops Placement; the demo then ends on its own.
        rest = proc.communicate('\n', timeout=60)[0]
    assert proc.returncode == 0, rest
    assert 'The sample tree stays at' in rest
