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

"""Options of the ``[cyborg_nova_privsep]`` group: the privileged side.

The privsep daemons read these from their own configuration (the files
``privsep-helper`` is started with), never from the caller: an
unprivileged caller that could choose the sysfs root or the drop-in file
could make a daemon write anywhere. Each privsep context also has its own
section (oslo.privsep's ``user``, ``group``, ``capabilities``,
``helper_command``...), named by the ``*_SECTION`` constants below.
"""

from __future__ import annotations

from oslo_config import cfg

from cyborg_nova.conf import groups

GROUP = cfg.OptGroup(
    'cyborg_nova_privsep',
    title='cyborg-nova privileged helpers',
    help='What the privsep daemons of cyborg-nova may touch. Read by the '
         'daemons themselves, not by the services that call them.')

#: oslo.privsep sections of the contexts in ``privsep/__init__.py``.
SYSFS_SECTION = 'cyborg_nova_privsep_sysfs'
NOVA_CONFIG_SECTION = 'cyborg_nova_privsep_nova_config'
LIBVIRT_SECTION = 'cyborg_nova_privsep_libvirt'
NET_SECTION = 'cyborg_nova_privsep_net'
NVME_SECTION = 'cyborg_nova_privsep_nvme'

DEFAULT_DEVICE_SPEC_FILE = '/etc/nova/nova.conf.d/60-cyborg-nova-pci.conf'

OPTS = [
    cfg.StrOpt(
        'sysfs_root',
        default='/sys',
        help="""
Where sysfs is mounted, as the privsep daemons see it. Device binding,
VF counts and mediated devices are written below
``<sysfs_root>/bus/pci``, and every PCI address a caller passes must
name a device that exists there.

Only tests point this elsewhere (at a fake tree built from a host
profile).

Related options:

* ``[cyborg_nova] sysfs_root`` (what discovery reads; set both together)
"""),
    cfg.StrOpt(
        'pci_device_spec_file',
        default=DEFAULT_DEVICE_SPEC_FILE,
        help="""
The oslo.config drop-in that ``cyborg-nova whitelist-sync`` writes Nova's
``[pci] device_spec`` to (an absolute path). The file is replaced
atomically and always holds only what the last sync wrote; entries
operators keep in ``nova.conf`` itself are not touched.

nova-compute reads it only if it is started with ``--config-dir`` naming
its directory (``/etc/nova/nova.conf.d`` on most distributions), or with
an extra ``--config-file`` naming it. The directory must exist.

Related options:

* ``pci_device_spec_group``
"""),
    cfg.StrOpt(
        'pci_device_spec_group',
        help="""
Group that owns ``pci_device_spec_file``; the file is mode 0640, so this
group must include the user nova-compute runs as. Unset (default): the
group of the file's directory (``/etc/nova`` and its ``nova.conf.d`` are
``root:nova`` on most distributions).

Related options:

* ``pci_device_spec_file``
"""),
    cfg.StrOpt(
        'bitstream_dir',
        default='/var/lib/cyborg-nova/bitstreams',
        help="""
The directory the privileged helper loads FPGA bitstreams from. Callers
pass a bitstream's name, never a path: the helper resolves it here
again, refusing anything that leads out of the directory, and checks the
file's header against the device before running the programming tool.

Related options:

* ``[cyborg_nova] bitstream_dir`` (what the services validate against;
  set both together)
"""),
    cfg.StrOpt(
        'nvidia_sriov_manage',
        default='/usr/lib/nvidia/sriov-manage',
        help="""
NVIDIA's ``sriov-manage`` script (an absolute path), installed with the
vGPU manager. NVIDIA documents it as the only way to enable or disable a
GPU's SR-IOV VFs, so a VF count change on an NVIDIA GPU bound to NVIDIA's
``nvidia`` driver (``driver-update --num-vfs``, and writing the recorded
count back after a host reboot) runs ``sriov-manage -e <address>`` (every
VF) or ``sriov-manage -d <address>`` (none) instead of writing
``sriov_numvfs``. Other devices get the sysfs write.

Related options:

* ``nvidia_sriov_manage_timeout``
"""),
    cfg.IntOpt(
        'nvidia_sriov_manage_timeout',
        default=120,
        min=1,
        help="""
Seconds ``sriov-manage`` may run before the privileged helper kills it
and reports the VF count change as failed.

Related options:

* ``nvidia_sriov_manage``
"""),
    cfg.IntOpt(
        'fpga_program_timeout',
        default=600,
        min=1,
        help="""
Seconds the privileged helper lets an FPGA programming tool
(``fpgaconf``, ``xbmgmt``) run before it kills it and reports the load
as failed.
"""),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    groups.register(conf, GROUP, OPTS)


def list_opts() -> dict:
    return {GROUP: OPTS}
