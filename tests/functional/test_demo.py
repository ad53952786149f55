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
    listing = out.split('$ openstack resource provider list', 1)[1]
    assert 'demo-compute_accelerator_0000:d8:00.0' in listing
