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

"""What the in-L1 tests share: L1's sysfs read plainly, and the host.

Everything here reads the kernel's sysfs with plain file reads, never
through the project's code, so a test compares what the project reports
with what the kernel shows. The host's configuration (drivers, the state
store, Placement, the privsep daemons) is one file, :data:`CONF`,
written once per L1 run.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
import sys
import time

from cyborg_nova import providers
from tests.functional.agent import base as agent_base

DEVICES = '/sys/bus/pci/devices'
REPO = os.environ.get('L1_REPO', '')
PLACEMENT = os.environ.get('L1_PLACEMENT', '')
RUN = os.environ.get('RUN', '')
#: The compute node's name: L1's hostname, as nova-compute would take it.
NODENAME = socket.gethostname()
WORK = '/run/cyborg-nova-l1'
CONF = os.path.join(WORK, 'cyborg-nova.conf')
STATE = os.path.join(WORK, 'state.sqlite')
BIN = os.path.dirname(sys.executable)
IGB = ('0x8086', '0x10c9')
NVME = ('0x1b36', '0x0010')
IGB_VF = '0x8086:0x10ca'
#: The generic driver's matcher for the NVMe PF.
NVME_SPEC = {'vendor_id': '1b36', 'product_id': '0010',
             'resource_class': 'CUSTOM_NVME_FN'}
#: Under TCG a Python start, or an import of Nova, takes tens of seconds.
SLOW = 600


def read(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


def attr(address: str, name: str) -> str:
    return read(os.path.join(DEVICES, address, name))


def pf(ids: tuple[str, str]) -> str:
    """The address of the SR-IOV PF with (vendor, device) ``ids``."""
    for address in sorted(os.listdir(DEVICES)):
        if ((attr(address, 'vendor'), attr(address, 'device')) == ids
                and os.path.exists(os.path.join(DEVICES, address,
                                                'sriov_totalvfs'))):
            return address
    raise AssertionError('no PF %s:%s in %s' % (ids + (DEVICES,)))


def vfs(address: str) -> list[str]:
    """The PF's VFs, by their ``virtfnN`` links, in N order."""
    links = [n for n in os.listdir(os.path.join(DEVICES, address))
             if n.startswith('virtfn')]
    return [os.path.basename(os.readlink(os.path.join(DEVICES, address, n)))
            for n in sorted(links, key=lambda n: int(n[len('virtfn'):]))]


def driver(address: str) -> str | None:
    try:
        return os.path.basename(os.readlink(os.path.join(
            DEVICES, address, 'driver')))
    except OSError:
        return None


def iommu_group(address: str) -> int:
    return int(os.path.basename(os.readlink(os.path.join(
        DEVICES, address, 'iommu_group'))))


def numa_node(address: str) -> int | None:
    """The kernel's numa_node; -1 (no NUMA information) is None."""
    node = int(attr(address, 'numa_node'))
    return None if node < 0 else node


def wait_vfs(address: str, count: int) -> list[str]:
    """The PF's VFs once the kernel shows ``count`` of them."""
    return wait_for(lambda: len(vfs(address)) == count and vfs(address),
                    what='%d VFs on %s' % (count, address))


def wait_for(predicate, timeout: float = 60.0, what: str = 'condition',
             interval: float = 0.2):
    return agent_base.wait_for(predicate, timeout, interval, what)


def sections() -> dict:
    """The host's configuration, section by section (see :func:`host`)."""
    helper = 'env PYTHONPATH=%s %s --config-file %s' % (
        REPO, os.path.join(BIN, 'privsep-helper'), CONF)
    return {
        'DEFAULT': {'debug': 'True'},
        'cyborg_nova': {'sysfs_root': '/sys', 'state_path': STATE,
                        'enabled_drivers': 'nic_sriov,generic',
                        'auto_ready': 'True'},
        'cyborg_nic_sriov': {
            'physical_device_mappings': 'physnet1:%s' % pf(IGB)},
        'cyborg_generic': {'device_spec': json.dumps(NVME_SPEC)},
        'placement': {'auth_type': 'admin_token', 'endpoint': PLACEMENT,
                      'token': 'admin'},
        'cyborg_nova_privsep': {'sysfs_root': '/sys'},
        'cyborg_nova_privsep_sysfs': {'helper_command': helper},
        'cyborg_nova_privsep_libvirt': {'helper_command': helper},
        'cyborg_nova_privsep_net': {'helper_command': helper},
        'cyborg_nova_privsep_nvme': {'helper_command': helper},
    }


@functools.lru_cache(maxsize=None)
def host() -> str:
    """Writes :data:`CONF` once: this host as nova-compute configures it.

    The drivers see the igb PF (mapped to physnet1) and the NVMe PF (by
    the generic driver's matcher); Placement is the host's; the privsep
    daemons are started by the venv's ``privsep-helper``, as a
    deployment does (minus sudo), and read ``/sys``.
    """
    os.makedirs(WORK, exist_ok=True)
    agent_base.write_config(CONF, sections())
    return CONF


def cli(*args: str, timeout: float = SLOW) -> tuple[int, str, str]:
    """``cyborg-nova --config-file CONF ARGS``: (exit code, out, err)."""
    proc = subprocess.run(
        [os.path.join(BIN, 'cyborg-nova'), '--config-file', host()]
        + list(args), capture_output=True, text=True, timeout=timeout,
        env=agent_base.env())
    return proc.returncode, proc.stdout, proc.stderr


@functools.lru_cache(maxsize=None)
def reported() -> str:
    """This host reported to the host's Placement, as nova-compute does.

    tools/report_host.py runs the resource tracker's code path (Nova's
    report client and the project's provider tree update) once.
    """
    proc = subprocess.run(
        [sys.executable, '-W', 'ignore',
         os.path.join(REPO, 'tools', 'report_host.py'),
         '--placement', PLACEMENT, '--nodename', NODENAME,
         '--sysfs-root', '/sys', '--state-path', STATE,
         '--config-file', host(), '--drivers', 'nic_sriov,generic'],
        env=agent_base.env(), capture_output=True, text=True,
        timeout=SLOW)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return NODENAME


def placement() -> agent_base.Placement:
    return agent_base.Placement(PLACEMENT)


def provider(address: str) -> str:
    """The uuid of the provider of the accelerator at ``address``."""
    reported()
    name = providers.provider_name(NODENAME, address)
    found = placement().get('/resource_providers?name=%s'
                            % name)['resource_providers']
    assert found, 'no provider %s in Placement' % name
    return found[0]['uuid']


def record(name: str, value) -> None:
    """Keeps a measurement in $RUN/measured.json for the host's report."""
    path = os.path.join(RUN, 'measured.json')
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        data = {}
    data[name] = value
    with open(path, 'w') as f:
        json.dump(data, f, indent=1, sort_keys=True)


def elapsed(start: float) -> float:
    return round(time.monotonic() - start, 3)
