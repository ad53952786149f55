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

"""Privileged PCI operations: vfio-pci binding and SR-IOV VF counts.

Each entrypoint takes a PCI address (and a count), never a path: the
sysfs root comes from the daemon's own ``[cyborg_nova_privsep]
sysfs_root``. The work is done by an undecorated ``_inner`` function that
takes that root, so tests run it on a fake sysfs tree; every argument is
checked before the first write.
"""

from __future__ import annotations

import os

import privsep
from privsep import _common
from privsep import nvidia

VFIO_DRIVER = 'vfio-pci'


def _driver(dev_dir: str) -> str | None:
    """The name of the driver bound to the function, None if unbound."""
    try:
        return os.path.basename(os.readlink(os.path.join(dev_dir,
                                                         'driver')))
    except OSError:
        return None


@privsep.sysfs_admin.entrypoint
def bind_vfio(address: str) -> str | None:
    """Bind the PCI function at ``address`` to vfio-pci.

    :returns: the driver bound once the kernel probed the function:
        ``vfio-pci`` on success; callers must check it (a host without an
        IOMMU leaves the function unbound).
    :raises InvalidArgument: (or a subclass) a bad or unknown address, a
        bridge; nothing was written.
    :raises NotPossible: vfio-pci is not loaded; nothing was written.
    """
    return _bind_vfio(_common.sysfs_root(), address)


def _bind_vfio(sysfs_root: str, address: str) -> str | None:
    dev = _common.device_dir(sysfs_root, address)
    _common.refuse_bridge(dev, address)
    override = _common.require_attr(
        os.path.join(dev, 'driver_override'),
        '%s cannot be bound by driver_override (kernel older than 3.16?)'
        % address)
    probe = _common.require_attr(
        os.path.join(sysfs_root, 'bus', 'pci', 'drivers_probe'),
        'the PCI bus cannot probe drivers')
    if not os.path.isdir(os.path.join(sysfs_root, 'bus', 'pci', 'drivers',
                                      VFIO_DRIVER)):
        raise privsep.NotPossible(
            'the vfio-pci driver is not loaded (no bus/pci/drivers/'
            'vfio-pci under %s); load it with "modprobe vfio-pci"'
            % sysfs_root)
    current = _driver(dev)
    if (current == VFIO_DRIVER
            and _common.read_attr(override) == VFIO_DRIVER):
        return current
    unbind = None
    if current not in (None, VFIO_DRIVER):
        unbind = _common.require_attr(
            os.path.join(dev, 'driver', 'unbind'),
            'driver %s of %s cannot unbind it' % (current, address))

    # The override first: once it is set, no other driver can claim the
    # function between the unbind and the probe.
    _common.write_attr(override, VFIO_DRIVER)
    if unbind is not None:
        _common.write_attr(unbind, address)
    if current != VFIO_DRIVER:
        _common.write_attr(probe, address)
    return _driver(dev)


@privsep.sysfs_admin.entrypoint
def unbind(address: str) -> str | None:
    """Unbind the PCI function at ``address`` from its driver.

    Also clears ``driver_override``, so the next probe (a
    ``drivers_probe``, a reboot) binds the function's own host driver
    again instead of vfio-pci.

    :returns: the driver it was bound to, None if it was unbound.
    :raises InvalidArgument: (or a subclass) a bad or unknown address, a
        bridge; nothing was written.
    """
    return _unbind(_common.sysfs_root(), address)


def _unbind(sysfs_root: str, address: str) -> str | None:
    dev = _common.device_dir(sysfs_root, address)
    _common.refuse_bridge(dev, address)
    override = _common.require_attr(
        os.path.join(dev, 'driver_override'),
        '%s has no driver_override (kernel older than 3.16?)' % address)
    current = _driver(dev)
    unbind_attr = None
    if current is not None:
        unbind_attr = _common.require_attr(
            os.path.join(dev, 'driver', 'unbind'),
            'driver %s of %s cannot unbind it' % (current, address))

    # A newline alone clears the override (the kernel's documented way).
    if _common.read_attr(override) not in ('', '(null)'):
        _common.write_attr(override, '\n')
    if unbind_attr is not None:
        _common.write_attr(unbind_attr, address)
    return current


@privsep.sysfs_admin.entrypoint
def set_num_vfs(address: str, count: int) -> int:
    """Enable ``count`` SR-IOV VFs on the physical function at ``address``.

    0 disables them all. The kernel refuses to change a non-zero count to
    another non-zero count, so that is done through 0: the existing VFs
    disappear first (their users must be gone already). An NVIDIA GPU
    bound to NVIDIA's driver gets its VFs through NVIDIA's
    ``sriov-manage`` instead (:func:`privsep.nvidia.set_num_vfs_of_gpu`:
    every VF or none).

    :returns: ``count``, now in ``sriov_numvfs``.
    :raises InvalidArgument: (or a subclass) a bad or unknown address, a
        function without SR-IOV, a count that is not an integer or is
        outside 0 to ``sriov_totalvfs`` (for an NVIDIA GPU: not 0 nor
        all); nothing was written.
    :raises NotPossible: ``sriov-manage`` is missing or failed.
    """
    conf = _common.privileged_conf()
    return _set_num_vfs(_common.sysfs_root(), address, count,
                        sriov_manage=conf.nvidia_sriov_manage,
                        sriov_manage_timeout=conf.nvidia_sriov_manage_timeout)


def _set_num_vfs(sysfs_root: str, address: str, count: int, *,
                 sriov_manage: str = '/usr/lib/nvidia/sriov-manage',
                 sriov_manage_timeout: float = 120, run=None) -> int:
    dev = _common.device_dir(sysfs_root, address)
    # bool is an int subclass; True VFs is a caller's bug, not 1.
    if not isinstance(count, int) or isinstance(count, bool):
        raise privsep.InvalidArgument(
            'count must be an integer, not %r' % (count,))
    total_attr = os.path.join(dev, 'sriov_totalvfs')
    numvfs = os.path.join(dev, 'sriov_numvfs')
    for path in (total_attr, numvfs):
        _common.require_attr(
            path, '%s is not an SR-IOV physical function' % address)
    total = _common.read_attr(total_attr)
    current = _common.read_attr(numvfs)
    if not (total or '').isdigit() or not (current or '').isdigit():
        raise privsep.NotPossible(
            'cannot read the SR-IOV state of %s (sriov_totalvfs %r, '
            'sriov_numvfs %r)' % (address, total, current))
    if not 0 <= count <= int(total):
        raise privsep.OutOfRange(
            'count %d is out of range for %s: 0 to %s (sriov_totalvfs)'
            % (count, address, total))

    if nvidia.manages_vfs(dev):
        kwargs = {'run': run} if run is not None else {}
        return nvidia.set_num_vfs_of_gpu(
            dev, address, count, int(total), int(current),
            tool=sriov_manage, timeout=sriov_manage_timeout, **kwargs)
    if int(current) == count:
        return count
    if int(current) and count:
        _common.write_attr(numvfs, '0')
    _common.write_attr(numvfs, str(count))
    return count


@privsep.sysfs_admin.entrypoint
def reset_function(address: str) -> str:
    """Reset the PCI function at ``address`` as the kernel can.

    A write of ``1`` to its ``reset``: the kernel tries the methods in
    the function's ``reset_method`` (a function-level reset first for a
    VF) and fails the write if none worked. The function keeps its
    driver; what a guest left in it is gone.

    :returns: the function's reset methods, as the kernel lists them
        (empty on a kernel older than 5.15, which has no list).
    :raises InvalidArgument: (or a subclass) a bad or unknown address, a
        bridge; nothing was written.
    :raises NotPossible: the kernel offers no way to reset it (no
        ``reset``), or the reset failed.
    """
    return _reset_function(_common.sysfs_root(), address)


def _reset_function(sysfs_root: str, address: str) -> str:
    dev = _common.device_dir(sysfs_root, address)
    _common.refuse_bridge(dev, address)
    reset = os.path.join(dev, 'reset')
    methods = _common.read_attr(os.path.join(dev, 'reset_method')) or ''
    if not os.path.isfile(reset):
        raise privsep.NotPossible(
            '%s cannot be reset: the kernel offers no reset method for it '
            '(it has no reset attribute)' % address)
    try:
        _common.write_attr(reset, '1')
    except OSError as exc:
        raise privsep.NotPossible('reset of %s failed (methods: %s): %s'
                                  % (address, methods or 'unknown', exc))
    return methods
