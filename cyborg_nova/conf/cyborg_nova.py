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

"""Options of the ``[cyborg_nova]`` group (nova.conf on computes)."""

from oslo_config import cfg

from cyborg_nova.conf import groups

GROUP = cfg.OptGroup(
    'cyborg_nova',
    title='cyborg-nova accelerator options',
    help='How this compute host discovers and reports accelerators.')

OPTS = [
    cfg.ListOpt(
        'enabled_drivers',
        default=['nvidia_gpu', 'intel_fpga', 'xilinx_fpga', 'intel_qat'],
        help="""
Accelerator drivers to run, by entry-point name.

Names come from the ``cyborg_nova.drivers`` entry-point namespace
(``cyborg-nova driver-list`` shows what is installed). The default runs
every bundled driver that needs no configuration. ``generic`` and
``nic_sriov`` report nothing until their own group is configured; ``fake``
reads a host profile and is for test clouds. When two drivers claim the
same PCI function, the one listed first wins.

Related options:

* ``[cyborg_generic] device_spec``, ``[cyborg_nic_sriov]
  physical_device_mappings``, ``[cyborg_fake] host_profile``
"""),
    cfg.StrOpt(
        'sysfs_root',
        default='/sys',
        help="""
Where sysfs is mounted; discovery reads ``<sysfs_root>/bus/pci``.

Only tests and the ``fake`` driver point this elsewhere.
"""),
    cfg.BoolOpt(
        'auto_ready',
        default=False,
        help="""
Mark newly discovered accelerators ready at once.

By default a new accelerator starts ``inactive``: it is reported to
Placement fully reserved until an operator marks it ready, so a device
that appeared by surprise is never handed to a tenant. Set this to
``True`` for CI and small clouds where every device is trusted.

Related options:

* ``state_path``
"""),
    cfg.StrOpt(
        'state_path',
        default='/var/lib/cyborg-nova/state.sqlite',
        help="""
The host's accelerator state store (SQLite, WAL mode).

Holds each device's lifecycle state (inactive, ready, unhealthy, held...),
shared by nova-compute, the agent and the CLI on this host. Its directory
must be writable by the nova user.

Related options:

* ``state_owner`` (who owns it when a command run as root creates it)
"""),
    cfg.StrOpt(
        'state_owner',
        default='',
        help="""
The user that owns the state store's files: the user nova-compute runs as.

When a ``cyborg-nova`` command that writes the store (or the agent) runs
as root and creates the store's directory or file, it gives them to this
user and that user's primary group, and logs one line saying so; the
``-wal`` and ``-shm`` files SQLite creates beside the store get the
store's owner. Files that already exist are never given away. Empty (the
default): the owner of the store's directory, if that directory already
exists; otherwise the user running the command (root), and nova-compute
cannot open the store until it is given to its user. Ignored when not
run as root. Commands that only read the store (``device-list``,
``device-show`` and the like) never create or change anything.

Related options:

* ``state_path``
"""),
    cfg.StrOpt(
        'bitstream_dir',
        default='/var/lib/cyborg-nova/bitstreams',
        help="""
The directory FPGA bitstreams are programmed from.

``cyborg-nova program --bitstream NAME`` (and the agent's and the
conductor-lite's program APIs) take a name under this directory: a file
name or a relative path. Absolute paths, ``..`` and symlinks that lead
out of the directory are refused before anything is touched. The
privileged helper resolves the name again under its own
``[cyborg_nova_privsep] bitstream_dir``; point both at the same
directory.

Related options:

* ``[cyborg_nova_privsep] bitstream_dir``, ``program_timeout``
"""),
    cfg.IntOpt(
        'program_timeout',
        default=900,
        min=1,
        help="""
Seconds the driver may take to load one bitstream. A load that takes
longer fails the programming job: the device stays fenced (fully
reserved) in the ``failed`` state, with the
``CUSTOM_FPGA_PROGRAMMING_FAILED`` trait on its provider.

Related options:

* ``[cyborg_nova_privsep] fpga_program_timeout`` (the privileged
  helper's own bound on the programming tool)
"""),
    cfg.IntOpt(
        'program_concurrency',
        default=4,
        min=1,
        help="""
How many FPGAs one ``cyborg-nova program`` (or one agent) programs at
the same time when several are asked for (``--all-free-in-host`` or a
list of devices).
"""),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    groups.register(conf, GROUP, OPTS)


def list_opts():
    return {GROUP: OPTS}
