"""Options of the ``[cyborg_nova]`` group (nova.conf on computes)."""

from oslo_config import cfg

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
"""),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(GROUP)
    conf.register_opts(OPTS, group=GROUP)


def list_opts():
    return {GROUP: OPTS}
