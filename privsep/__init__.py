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

"""The privsep contexts of cyborg-nova, and the errors their calls raise.

Every context of the project is defined here and nowhere else, each with
the fewest capabilities its entrypoints need and a config section of its
own (so an operator can run each daemon as another user, or with a
``helper_command`` of their own). The entrypoints live in one module per
domain (:mod:`privsep.pci`, :mod:`privsep.mdev`, :mod:`privsep.qat`,
:mod:`privsep.nova_conf`, :mod:`privsep.libvirt`, :mod:`privsep.net`,
:mod:`privsep.nvme`) and
are called by their
full module path, so privileged calls stand out in the code that makes
them.

The capabilities of each context, and why it needs each one, are listed
in ``doc/source/admin/privsep.rst``; a unit test compares that table with
the contexts below.
"""

from oslo_privsep import capabilities as caps
from oslo_privsep import priv_context

from cyborg_nova.conf import privsep as privsep_conf

#: Binding PCI functions to vfio-pci (``driver_override``,
#: ``drivers_probe``, ``unbind``), VF counts (``sriov_numvfs``), mediated
#: devices (``create``, ``remove``) and QAT services
#: (``qat/cfg_services``). These attributes are
#: root-owned and mode 0200 or 0644: CAP_DAC_OVERRIDE writes them
#: whichever user the daemon runs as. None of these kernel handlers checks
#: CAP_SYS_ADMIN (only config space beyond 64 bytes, resets and rescans
#: do, and nothing here uses them), so the context does not keep it.
sysfs_admin = priv_context.PrivContext(
    'privsep',
    cfg_section=privsep_conf.SYSFS_SECTION,
    pypath=__name__ + '.sysfs_admin',
    capabilities=[caps.CAP_DAC_OVERRIDE],
)

#: Writing Nova's ``[pci] device_spec`` drop-in in ``/etc/nova``:
#: CAP_DAC_OVERRIDE to create and rename in a directory another user owns
#: (``nova:nova`` in some deployments), CAP_CHOWN to give the file the
#: group nova-compute reads it with, CAP_FOWNER to replace a drop-in that
#: another user owns in a sticky directory (rename(2) checks ownership
#: there).
nova_config = priv_context.PrivContext(
    'privsep',
    cfg_section=privsep_conf.NOVA_CONFIG_SECTION,
    pypath=__name__ + '.nova_config',
    capabilities=[caps.CAP_DAC_OVERRIDE, caps.CAP_CHOWN, caps.CAP_FOWNER],
)

#: Device hot-plug through libvirt for callers that cannot reach
#: libvirt's root-owned socket (the agent, the CLI): CAP_DAC_OVERRIDE to
#: connect to the socket, CAP_DAC_READ_SEARCH to traverse
#: ``/run/libvirt`` when it is not searchable by the daemon's user.
libvirt_hotplug = priv_context.PrivContext(
    'privsep',
    cfg_section=privsep_conf.LIBVIRT_SECTION,
    pypath=__name__ + '.libvirt_hotplug',
    capabilities=[caps.CAP_DAC_OVERRIDE, caps.CAP_DAC_READ_SEARCH],
)

net_admin = priv_context.PrivContext(
    'privsep',
    cfg_section=privsep_conf.NET_SECTION,
    pypath=__name__ + '.net_admin',
    capabilities=[caps.CAP_NET_ADMIN],
)

nvme_admin = priv_context.PrivContext(
    'privsep',
    cfg_section=privsep_conf.NVME_SECTION,
    pypath=__name__ + '.nvme_admin',
    capabilities=[caps.CAP_SYS_ADMIN, caps.CAP_DAC_OVERRIDE],
)


# The errors below cross the privsep channel: the client re-raises them
# as ``cls(*args)``, so each takes its message as its only argument.

class InvalidArgument(ValueError):
    """A privileged call was refused before anything was written."""


class NotAPciAddress(InvalidArgument):
    """The argument is not a full, lowercase PCI address."""


class NoSuchDevice(InvalidArgument):
    """The PCI address names no device on this host's bus."""


class PathLikeArgument(InvalidArgument):
    """The argument contains a path separator, ``..`` or a NUL byte."""


class UnknownAttribute(InvalidArgument):
    """The device has no such attribute, type or setting."""


class OutOfRange(InvalidArgument):
    """A number outside what the device (or the call) allows."""


class NotPossible(RuntimeError):
    """The host is not in a state to do it (e.g. vfio-pci not loaded)."""
