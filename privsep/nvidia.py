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

"""Privileged changes to NVIDIA GPUs: vGPU types and SR-IOV VFs.

With vGPU 17+ on Ada, Hopper and Blackwell a vGPU is made by writing a
type id to a VF's ``nvidia/current_vgpu_type`` and removed by writing 0.
The caller names the VF by PCI address and the type by number; the VF
must be an NVIDIA SR-IOV VF with those files, the type one its
``creatable_vgpu_types`` lists, and a VF already holding a type is never
changed to another: clearing names the type expected there, so a type
someone else set is never taken away.

A GPU's VFs are enabled and disabled the way NVIDIA documents it, with
its ``sriov-manage`` script (``-e``: every VF, ``-d``: none), never by a
``sriov_numvfs`` write: :func:`set_num_vfs_of_gpu`, which
:func:`privsep.pci.set_num_vfs` hands NVIDIA GPUs to.
"""

from __future__ import annotations

import os
import subprocess

from cyborg_drivers.nvidia import vgpu
import privsep
from privsep import _common

_VENDOR_NVIDIA = '0x10de'
# The kernel driver whose GPUs sriov-manage manages.
_NVIDIA_DRIVER = 'nvidia'
_OUTPUT_TAIL = 2000


def _type_id(value: object, allow_zero: bool = False) -> int:
    """``value`` if it is a vGPU type id (an int, not a bool).

    :raises InvalidArgument: not an int.
    :raises OutOfRange: below 1 (or 0) or beyond 32 bits.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise privsep.InvalidArgument(
            'type_id must be an integer (the number creatable_vgpu_types '
            'lists), not %r' % (value,))
    if not (0 if allow_zero else 1) <= value <= vgpu.TYPE_ID_MAX:
        raise privsep.OutOfRange('type_id %d is not a vGPU type id (1 to '
                                 '%d)' % (value, vgpu.TYPE_ID_MAX))
    return value


def _vf_files(sysfs_root: str, address: object) -> tuple[str, str]:
    """The VF's ``current_vgpu_type`` path and its current type id.

    :raises InvalidArgument: (or a subclass) a bad or unknown address,
        not an NVIDIA VF, no vendor-specific VFIO files, unreadable type.
    """
    dev = _common.device_dir(sysfs_root, address)
    vendor = _common.read_attr(os.path.join(dev, 'vendor'))
    if vendor != _VENDOR_NVIDIA or not os.path.islink(
            os.path.join(dev, 'physfn')):
        raise privsep.InvalidArgument(
            '%s is not an NVIDIA SR-IOV VF (vendor %s)' % (address, vendor))
    current = _common.require_attr(
        os.path.join(dev, vgpu.VFIO_DIR, vgpu.CURRENT),
        'VF %s has no NVIDIA vendor-specific VFIO vGPU (is the vGPU '
        'manager 17+ loaded?)' % address)
    held = vgpu.parse_type_id(_common.read_attr(current))
    if held is None:
        raise privsep.NotPossible('%s of VF %s is unreadable'
                                  % (current, address))
    return current, held


@privsep.sysfs_admin.entrypoint
def set_vgpu_type(address: str, type_id: int) -> int:
    """Make VF ``address`` a vGPU of type ``type_id``.

    :returns: ``type_id``; nothing is written if the VF holds it already.
    :raises InvalidArgument: (or a subclass) a bad or unknown address,
        not an NVIDIA vendor-VFIO VF, a type id that is not a number, a
        VF holding another type, a type the VF cannot create now; nothing
        was written.
    """
    return _set_vgpu_type(_common.sysfs_root(), address, type_id)


def _set_vgpu_type(sysfs_root: str, address: str, type_id: int) -> int:
    type_id = _type_id(type_id)
    current, held = _vf_files(sysfs_root, address)
    if held == type_id:
        return type_id
    if held:
        raise privsep.InvalidArgument(
            'VF %s holds vGPU type %d; it is not changed to %d'
            % (address, held, type_id))
    creatable = vgpu.parse_creatable(_common.read_attr(os.path.join(
        os.path.dirname(current), vgpu.CREATABLE)))
    if type_id not in creatable:
        raise privsep.UnknownAttribute(
            'vGPU type %d cannot be created on VF %s now (creatable: %s)'
            % (type_id, address, ', '.join(
                '%d' % t for t in sorted(creatable)) or 'none'))
    _common.write_attr(current, '%d' % type_id)
    return type_id


@privsep.sysfs_admin.entrypoint
def clear_vgpu_type(address: str, type_id: int) -> None:
    """Remove the vGPU of type ``type_id`` from VF ``address`` (write 0).

    Nothing is written if the VF holds no type.

    :raises InvalidArgument: (or a subclass) a bad or unknown address,
        not an NVIDIA vendor-VFIO VF, a VF holding another type than
        ``type_id``; nothing was written.
    """
    _clear_vgpu_type(_common.sysfs_root(), address, type_id)


def _clear_vgpu_type(sysfs_root: str, address: str, type_id: int) -> None:
    type_id = _type_id(type_id)
    current, held = _vf_files(sysfs_root, address)
    if held == 0:
        return
    if held != type_id:
        raise privsep.InvalidArgument(
            'VF %s holds vGPU type %d, not %d; it is left as it is'
            % (address, held, type_id))
    _common.write_attr(current, '0')


# -- SR-IOV VFs of a GPU ----------------------------------------------------

def manages_vfs(dev: str) -> bool:
    """Whether NVIDIA's ``sriov-manage`` changes the VFs of ``dev``.

    ``dev`` is a function's sysfs directory; it is so for a display
    controller of NVIDIA's bound to its ``nvidia`` driver.
    """
    driver = os.path.join(dev, 'driver')
    return (_common.read_attr(os.path.join(dev, 'vendor')) == _VENDOR_NVIDIA
            and (_common.read_attr(os.path.join(dev, 'class')) or ''
                 ).startswith('0x03')
            and os.path.islink(driver)
            and os.path.basename(os.readlink(driver)) == _NVIDIA_DRIVER)


def set_num_vfs_of_gpu(dev: str, address: str, count: int, total: int,
                       current: int, *, tool: str, timeout: float,
                       run=subprocess.run) -> int:
    """``count`` VFs on the NVIDIA GPU at ``address``, by ``sriov-manage``.

    Called by :func:`privsep.pci.set_num_vfs` with the checked count and
    the PF's sysfs directory ``dev``. The script enables every VF or
    none, so ``count`` must be 0 or ``total``.

    :raises OutOfRange: another count.
    :raises NotPossible: the script is not installed, failed, timed out,
        or left another count than asked.
    """
    if current == count:
        return count
    if count not in (0, total):
        raise privsep.OutOfRange(
            'NVIDIA GPU %s enables all of its %d VFs or none (NVIDIA\'s '
            'sriov-manage), not %d' % (address, total, count))
    if not os.path.isabs(tool) or not os.access(tool, os.X_OK):
        raise privsep.NotPossible(
            'NVIDIA\'s sriov-manage is not at %s ([cyborg_nova_privsep] '
            'nvidia_sriov_manage of the privsep daemon); it enables the '
            'VFs of %s' % (tool, address))
    argv = [tool, '-e' if count else '-d', address]
    _common.LOG.info('VFs of NVIDIA GPU %s: %d -> %d: %s', address, current,
                     count, ' '.join(argv))
    try:
        proc = run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                   stderr=subprocess.STDOUT, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise privsep.NotPossible('sriov-manage did not finish within %s s '
                                  'for %s; it was killed' % (timeout,
                                                             address))
    except OSError as exc:
        raise privsep.NotPossible('cannot run %s: %s' % (tool, exc))
    output = (proc.stdout or b'').decode('utf-8', 'replace').strip()
    if proc.returncode != 0:
        raise privsep.NotPossible(
            'sriov-manage %s %s exited with status %s: %s' % (
                argv[1], address, proc.returncode,
                output[-_OUTPUT_TAIL:] or 'no output'))
    after = _common.read_attr(os.path.join(dev, 'sriov_numvfs'))
    if after != str(count):
        raise privsep.NotPossible(
            'sriov-manage %s %s left sriov_numvfs at %s, not %d: %s'
            % (argv[1], address, after, count,
               output[-_OUTPUT_TAIL:] or 'no output'))
    return count
