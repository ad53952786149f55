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

"""Host profiles for the fake sysfs builder: loading, validation, synthesis.

A host profile declares the PCI functions of a host (see
``cyborg_drivers/fake/profiles/*.yaml`` and :mod:`.hosttree`). This module
turns YAML or a dict into a *normalised* profile: every device has every
key, ids are ints, uuids are 32 lowercase hex digits, optional sections
are ``None`` when absent. Normalising an already normalised profile gives
the same profile, so :func:`normalise_profile` can be applied to anything
a caller hands in.
"""

from __future__ import annotations

import os
import re
from typing import Any
import uuid as uuid_lib

import yaml

PROFILE_NAMES = ('gpu-host', 'fpga-host', 'crypto-nic-host', 'mixed-host',
                 'vgpu-vfio-host', 'mdev-vf-host', 'qat-gen4-host',
                 'ofs-fpga-host')
PROFILE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           'profiles')

# Four to eight domain digits: Intel VMD puts its devices in domains from
# 10000 on.
_ADDRESS_RE = re.compile(
    r'^([0-9a-f]{4,8}):([0-9a-f]{2}):([0-1][0-9a-f])\.([0-7])$')
# Driver, mdev type and interface names end up as file names in the tree.
_NAME_RE = re.compile(r'^[A-Za-z0-9_.:+-]+$')
_IFNAME_RE = re.compile(r'^[A-Za-z0-9_.-]{1,15}$')
_BRIDGE_SUBCLASS = 0x0604

_TOP_KEYS = ('name', 'description', 'devices')
_DEVICE_KEYS = ('address', 'vendor', 'device', 'class', 'subsystem_vendor',
                'subsystem_device', 'revision', 'numa_node', 'driver',
                'iommu_group', 'parent', 'label', 'sriov', 'fpga', 'xilinx',
                'mdev_types', 'net', 'qat', 'nvidia_vgpu')
_SRIOV_KEYS = ('totalvfs', 'numvfs', 'vf_device', 'vf_driver', 'offset',
               'stride', 'vf_mdev_types')
_FPGA_KEYS = ('layout', 'role', 'interface_id', 'afu_id', 'vf_afu_ids',
              'port_errors', 'bitstream_id')
# Layout -> the PCI driver that creates it: a function shows the layout
# only while that driver is bound.
FPGA_LAYOUT_DRIVERS = {'opae': 'intel-fpga-pci', 'dfl': 'dfl-pci'}
_FPGA_LAYOUTS = tuple(FPGA_LAYOUT_DRIVERS)
# pac: FME and port on the PF; SR-IOV moves the port to the VF.
# ofs-fme: an OFS board's PF0: FME and a port that stays on the PF; each
# VF has a port of its own. ofs-port: another PF of an OFS board, a port
# only. Documentation/fpga/dfl.rst, drivers/fpga/dfl-pci.c.
FPGA_ROLES = ('pac', 'ofs-fme', 'ofs-port')
_U64_MAX = 0xffffffffffffffff
_XILINX_KEYS = ('interface_uuids', 'logic_uuids')
_MDEV_KEYS = ('name', 'available_instances', 'device_api', 'description',
              'devices')
_NVIDIA_VGPU_KEYS = ('types', 'current')
# NVIDIA's vGPU type ids are unsigned 32-bit numbers; 0 means "none".
_VGPU_TYPE_MAX = 0xffffffff
_QAT_KEYS = ('cfg_services', 'state', 'pm_idle_enabled', 'auto_reset')
# The QAT PFs whose kernel driver gives them qat/ (adf_sysfs_init(), called
# by the 4xxx, 420xx and 6xxx drivers' probe; the older generations' drivers
# have no such attributes): device id -> (driver, services its cfg_services
# store accepts, how many it combines). Documentation/ABI/testing/
# sysfs-driver-qat and qat_common/adf_cfg_services.c.
_QAT_GEN4_SERVICES = ('asym', 'sym', 'dc', 'dcc')
_QAT_GEN6_SERVICES = ('asym', 'sym', 'dc', 'decomp', 'dcc')
QAT_SYSFS = {
    0x4940: ('4xxx', _QAT_GEN4_SERVICES, 2),
    0x4942: ('4xxx', _QAT_GEN4_SERVICES, 2),
    0x4944: ('4xxx', _QAT_GEN4_SERVICES, 2),
    0x4946: ('420xx', _QAT_GEN4_SERVICES, 2),
    0x4948: ('6xxx', _QAT_GEN6_SERVICES, 3),
}
# What the kernel configures at probe: crypto (ADF_CFG_CY, "sym;asym"),
# which is what the first device it probes gets.
_QAT_DEFAULT_SERVICES = 'sym;asym'
_HEX_FIELDS = ('vendor', 'device', 'class', 'subsystem_vendor',
               'subsystem_device', 'revision', 'vf_device')


# Default of fields that have none.
_REQUIRED = object()


class ProfileError(ValueError):
    """A host profile is malformed; the message names device and field."""


def parse_address(address: str) -> tuple[int, int, int, int]:
    """``'0000:af:02.1'`` -> ``(0, 0xaf, 2, 1)``; ValueError if malformed."""
    m = _ADDRESS_RE.match(address) if isinstance(address, str) else None
    if not m:
        raise ValueError('not a PCI address: %r' % (address,))
    return tuple(int(part, 16) for part in m.groups())


def format_address(domain: int, bus: int, slot: int, func: int) -> str:
    return '%04x:%02x:%02x.%d' % (domain, bus, slot, func)


def vf_addresses(address: str, sriov: dict | None) -> list[str]:
    """Addresses of the existing VFs of a PF, in VF index order.

    The SR-IOV capability places VF n at routing id
    ``PF rid + offset + n * stride`` (rid = bus << 8 | slot << 3 | func),
    which may cross slot and bus boundaries but never the domain.
    """
    if not sriov:
        return []
    domain, bus, slot, func = parse_address(address)
    pf_rid = bus << 8 | slot << 3 | func
    result = []
    for n in range(sriov.get('numvfs', 0)):
        rid = pf_rid + sriov.get('offset', 1) + n * sriov.get('stride', 1)
        if rid > 0xffff:
            raise ValueError('VF %d of %s would be past bus ff'
                             % (n, address))
        result.append(format_address(domain, rid >> 8, (rid >> 3) & 0x1f,
                                     rid & 7))
    return result


def is_bridge(dev: dict) -> bool:
    return dev['class'] >> 8 == _BRIDGE_SUBCLASS


def expand_functions(profile: dict) -> list[dict]:
    """Every PCI function of a normalised profile, VFs included.

    Returned sorted by address. A VF is a device-like dict with ``physfn``
    (its PF's address) and ``vf_index`` set; on PFs and ordinary devices
    both are ``None``. A VF inherits its PF's ids (but ``device``, which
    is ``vf_device``), NUMA node and parent; its driver is ``vf_driver``.
    It has an ``fpga`` section (:func:`_vf_fpga`) only when bound to its
    PF's FPGA driver: only that driver gives it a port in sysfs.
    """
    functions = []
    for dev in profile['devices']:
        functions.append(dict(dev, physfn=None, vf_index=None))
        sriov = dev['sriov']
        for n, address in enumerate(vf_addresses(dev['address'], sriov)):
            vf = dict.fromkeys(dev)
            vf.update(address=address, vendor=dev['vendor'],
                      device=sriov['vf_device'], revision=dev['revision'],
                      numa_node=dev['numa_node'], parent=dev['parent'],
                      driver=sriov['vf_driver'], physfn=dev['address'],
                      vf_index=n,
                      fpga=_vf_fpga(dev, n),
                      mdev_types=sriov['vf_mdev_types'],
                      nvidia_vgpu=_vf_vgpu(dev['nvidia_vgpu'], n))
            for key in ('class', 'subsystem_vendor', 'subsystem_device'):
                vf[key] = dev[key]
            functions.append(vf)
    functions.sort(key=lambda f: parse_address(f['address']))
    return functions


def profile_path(name: str) -> str:
    """Path of a profile shipped with the package, e.g. ``'fpga-host'``."""
    if name not in PROFILE_NAMES:
        raise ProfileError('unknown profile %r (shipped: %s)'
                           % (name, ', '.join(PROFILE_NAMES)))
    return os.path.join(PROFILE_DIR, name + '.yaml')


def load_profile(path: str) -> dict:
    """Read, validate and normalise a YAML host profile."""
    try:
        with open(path, encoding='utf-8') as f:
            raw = yaml.safe_load(f)
    except OSError as exc:
        raise ProfileError('%s: cannot read profile: %s'
                           % (path, exc.strerror or exc))
    except yaml.YAMLError as exc:
        # YAML errors span several lines; callers print one.
        raise ProfileError('%s: invalid YAML: %s'
                           % (path, ' '.join(str(exc).split())))
    return normalise_profile(raw, source=path)


def normalise_profile(raw: Any, source: str | None = None) -> dict:
    """Validate a profile (dict as read from YAML) and fill in defaults."""
    try:
        return _normalise(raw)
    except ProfileError as exc:
        if source:
            raise ProfileError('%s: %s' % (source, exc))
        raise


# -- field checks -------------------------------------------------------------


def _mapping(value: Any, where: str, allowed: tuple[str, ...]) -> dict:
    if not isinstance(value, dict):
        raise ProfileError('%s must be a mapping, not %s'
                           % (where, type(value).__name__))
    unknown = sorted(str(k) for k in value if k not in allowed)
    if unknown:
        raise ProfileError('%s: unknown key(s) %s (allowed: %s)'
                           % (where, ', '.join(unknown), ', '.join(allowed)))
    return value


def _int(section: dict, key: str, where: str, lo: int, hi: int,
         default: Any = _REQUIRED) -> Any:
    if key not in section or section[key] is None:
        if default is _REQUIRED:
            raise ProfileError('%s: missing required field %r'
                               % (where, key))
        return default
    value = section[key]
    if isinstance(value, str):
        try:
            value = int(value.strip(), 0)
        except ValueError:
            raise ProfileError('%s: %s %r is not a number'
                               % (where, key, section[key]))
    elif isinstance(value, bool) or not isinstance(value, int):
        raise ProfileError('%s: %s must be an integer, not %r'
                           % (where, key, value))
    if not lo <= value <= hi:
        fmt = '%#x' if key in _HEX_FIELDS else '%d'
        raise ProfileError(('%%s: %%s %s out of range [%s, %s]'
                            % (fmt, fmt, fmt))
                           % (where, key, value, lo, hi))
    return value


def _str(section: dict, key: str, where: str, default: Any = _REQUIRED,
         pattern: re.Pattern | None = None) -> Any:
    value = section.get(key)
    if value is None:
        if default is _REQUIRED:
            raise ProfileError('%s: missing required field %r'
                               % (where, key))
        return default
    if not isinstance(value, str):
        raise ProfileError('%s: %s must be a string, not %r'
                           % (where, key, value))
    if pattern is not None and not pattern.match(value):
        raise ProfileError('%s: %s %r is not a valid name'
                           % (where, key, value))
    return value


def _uuid(value: Any, where: str) -> str:
    text = value.replace('-', '').lower() if isinstance(value, str) else ''
    if len(text) != 32 or not re.match(r'^[0-9a-f]{32}$', text):
        raise ProfileError('%s %r is not a uuid (32 hex digits, dashes '
                           'allowed); quote it in YAML' % (where, value))
    return text


def _address(value: Any, where: str) -> str:
    if not isinstance(value, str):
        # YAML 1.1 reads an unquoted 0000:00:17.0 as a base-60 number.
        raise ProfileError('%s: address %r must be a quoted string (YAML '
                           'reads an unquoted 0000:00:17.0 as a number)'
                           % (where, value))
    try:
        parse_address(value)
    except ValueError:
        raise ProfileError('%s: address %r is not domain:bus:slot.func '
                           '(lowercase hex, 4 to 8 domain digits, slot <= '
                           '1f, func <= 7)'
                           % (where, value))
    return value


# -- sections -----------------------------------------------------------------


def _sriov(raw: Any, where: str) -> dict | None:
    if raw is None:
        return None
    where += ': sriov'
    _mapping(raw, where, _SRIOV_KEYS)
    total = _int(raw, 'totalvfs', where, 1, 0xffff)
    num = _int(raw, 'numvfs', where, 0, 0xffff, 0)
    if num > total:
        raise ProfileError('%s: numvfs (%d) exceeds totalvfs (%d)'
                           % (where, num, total))
    return {'totalvfs': total, 'numvfs': num,
            'vf_device': _int(raw, 'vf_device', where, 0, 0xffff),
            'vf_driver': _str(raw, 'vf_driver', where, None, _NAME_RE),
            'vf_mdev_types': _mdev_types(raw.get('vf_mdev_types'),
                                         where + ': vf'),
            'offset': _int(raw, 'offset', where, 1, 0xffff, 1),
            'stride': _int(raw, 'stride', where, 1, 0xffff, 1)}


def _fpga(device: dict, dev_where: str) -> dict | None:
    """The ``fpga`` section of ``device`` (the raw device mapping)."""
    raw = device.get('fpga')
    if raw is None:
        return None
    where = dev_where + ': fpga'
    _mapping(raw, where, _FPGA_KEYS)
    layout = _str(raw, 'layout', where)
    if layout not in _FPGA_LAYOUTS:
        raise ProfileError('%s: layout %r is not one of %s'
                           % (where, layout, ', '.join(_FPGA_LAYOUTS)))
    role = _str(raw, 'role', where, 'pac')
    if role not in FPGA_ROLES:
        raise ProfileError('%s: role %r is not one of %s'
                           % (where, role, ', '.join(FPGA_ROLES)))
    if role != 'pac' and layout != 'dfl':
        raise ProfileError('%s: role %s needs layout dfl (OFS boards have '
                           'no OPAE driver)' % (where, role))
    driver = _str(device, 'driver', dev_where, None, _NAME_RE)
    if driver != FPGA_LAYOUT_DRIVERS[layout]:
        raise ProfileError('%s: layout %s is what driver %s creates, but '
                           'the function\'s driver is %s'
                           % (where, layout, FPGA_LAYOUT_DRIVERS[layout],
                              driver or 'none'))
    # Only an FME has a PR interface id: an OFS board's other PFs have none.
    if role == 'ofs-port':
        if raw.get('interface_id') is not None:
            raise ProfileError('%s: role ofs-port has no FME, so no '
                               'interface_id' % where)
        interface_id = None
    elif raw.get('interface_id') is None:
        raise ProfileError('%s: missing required field %r'
                           % (where, 'interface_id'))
    else:
        interface_id = _uuid(raw['interface_id'], where + ': interface_id')
    if raw.get('afu_id') is None:
        raise ProfileError('%s: missing required field %r'
                           % (where, 'afu_id'))
    vf_afu_ids = raw.get('vf_afu_ids') or []
    if not isinstance(vf_afu_ids, list):
        raise ProfileError('%s: vf_afu_ids must be a list of uuids' % where)
    if vf_afu_ids:
        # A PAC's VF gets the PF's own port: there is no other AFU.
        if role == 'pac':
            raise ProfileError('%s: vf_afu_ids is for OFS roles: a PAC\'s '
                               'VF takes the PF\'s port and its afu_id'
                               % where)
        sriov = _sriov(device.get('sriov'), dev_where)
        if not sriov or len(vf_afu_ids) > sriov['totalvfs']:
            raise ProfileError('%s: vf_afu_ids lists %d VFs, the function '
                               'has %d' % (where, len(vf_afu_ids),
                                           sriov['totalvfs'] if sriov
                                           else 0))
    return {'layout': layout,
            'role': role,
            'interface_id': interface_id,
            'afu_id': _uuid(raw['afu_id'], where + ': afu_id'),
            'vf_afu_ids': [_uuid(v, where + ': vf_afu_ids')
                           for v in vf_afu_ids],
            'port_errors': _int(raw, 'port_errors', where, 0, _U64_MAX,
                                None),
            'bitstream_id': _int(raw, 'bitstream_id', where, 0, _U64_MAX,
                                 None)}


def _vf_fpga(dev: dict, n: int) -> dict | None:
    """The ``fpga`` section of VF ``n`` of PF ``dev``, None if it has none.

    A VF shows a port only while its PF's FPGA driver is bound to it. A
    PAC's VF shows the PF's own port (released by the PF), with its AFU
    and errors; an OFS board's VF has a port of its own (``vf_afu_ids``,
    else the PF's ``afu_id``).
    """
    fpga, sriov = dev['fpga'], dev['sriov']
    if not fpga or sriov['vf_driver'] != FPGA_LAYOUT_DRIVERS[fpga['layout']]:
        return None
    if fpga['role'] == 'pac':
        return dict(fpga)
    ids = fpga['vf_afu_ids']
    return dict(fpga, afu_id=ids[n] if n < len(ids) else fpga['afu_id'],
                port_errors=None)


def _xilinx(raw: Any, where: str) -> dict | None:
    if raw is None:
        return None
    where += ': xilinx'
    _mapping(raw, where, _XILINX_KEYS)
    result = {}
    for key in _XILINX_KEYS:
        values = raw.get(key) or []
        if not isinstance(values, list):
            raise ProfileError('%s: %s must be a list of uuids'
                               % (where, key))
        result[key] = [_uuid(v, '%s: %s' % (where, key)) for v in values]
    return result


def _mdev_types(raw: Any, where: str) -> dict | None:
    if raw is None:
        return None
    where += ': mdev_types'
    if not isinstance(raw, dict):
        raise ProfileError('%s must be a mapping of type id to attributes'
                           % where)
    result = {}
    for type_id, attrs in raw.items():
        if not isinstance(type_id, str) or not _NAME_RE.match(type_id):
            raise ProfileError('%s: %r is not a valid type id'
                               % (where, type_id))
        twhere = '%s: %s' % (where, type_id)
        _mapping(attrs, twhere, _MDEV_KEYS)
        result[type_id] = {
            'name': _str(attrs, 'name', twhere),
            'available_instances': _int(attrs, 'available_instances',
                                        twhere, 0, 0xffff),
            'device_api': _str(attrs, 'device_api', twhere, 'vfio-pci'),
            'description': _str(attrs, 'description', twhere, ''),
            'devices': _mdev_devices(attrs.get('devices'), twhere)}
    return result


def _mdev_devices(raw: Any, where: str) -> list[str]:
    """Mediated devices that exist at boot, as canonical uuids."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ProfileError('%s: devices must be a list of uuids' % where)
    # sysfs names an mdev by its uuid in canonical (dashed) form.
    return [str(uuid_lib.UUID(_uuid(v, where + ': devices'))) for v in raw]


def _iommu_group(raw: dict, where: str) -> int | str | None:
    """The IOMMU group of a device: a number, ``'none'`` or None.

    ``'none'``: no IOMMU, so no ``iommu_group`` link; None: a group of
    its own, numbered by the builder.
    """
    if raw.get('iommu_group') == 'none':
        return 'none'
    return _int(raw, 'iommu_group', where, 0, 0xffffff, None)


def _nvidia_vgpu(raw: Any, where: str) -> dict | None:
    """NVIDIA's vendor-specific VFIO vGPU state of a PF's VFs.

    ``types``: type id -> full vGPU type name, what a free VF lists in
    ``nvidia/creatable_vgpu_types``; ``current``: VF index -> the type id
    already in its ``nvidia/current_vgpu_type`` at boot.
    """
    if raw is None:
        return None
    where += ': nvidia_vgpu'
    _mapping(raw, where, _NVIDIA_VGPU_KEYS)
    types = raw.get('types') or {}
    if not isinstance(types, dict):
        raise ProfileError('%s: types must map type ids to names' % where)
    result = {'types': {}, 'current': {}}
    for type_id, name in types.items():
        _int({'type id': type_id}, 'type id', where, 1, _VGPU_TYPE_MAX)
        if not isinstance(name, str) or not name.strip():
            raise ProfileError('%s: type %s needs a name' % (where, type_id))
        result['types'][int(type_id)] = name
    current = raw.get('current') or {}
    if not isinstance(current, dict):
        raise ProfileError('%s: current must map VF indexes to type ids'
                           % where)
    for index, type_id in current.items():
        index = _int({'VF index': index}, 'VF index', where, 0, 0xffff)
        result['current'][index] = _int({'type': type_id}, 'type',
                                        where, 0, _VGPU_TYPE_MAX)
    return result


def _vf_vgpu(section: dict | None, index: int) -> dict | None:
    """What VF ``index`` of a PF with ``nvidia_vgpu`` shows."""
    if section is None:
        return None
    return {'types': section['types'],
            'current': section['current'].get(index, 0)}


def _net(raw: Any, where: str) -> list | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise ProfileError('%s: net must be a list of interface names'
                           % where)
    for name in raw:
        if not isinstance(name, str) or not _IFNAME_RE.match(name):
            raise ProfileError('%s: net: %r is not a valid interface name'
                               % (where, name))
    return list(raw)


def _qat(dev: dict, where: str) -> dict | None:
    """What ``qat/`` of a QAT 4xxx, 420xx or 6xxx PF shows.

    The kernel creates ``qat/`` when its driver binds such a PF, so a
    bound one gets it even without a ``qat`` section (with the kernel's
    defaults); any other device, or one not bound to that driver, has
    none and may not have the section.
    """
    raw = dev.get('qat')
    vendor = _int(dev, 'vendor', where, 0, 0xffff)
    device = _int(dev, 'device', where, 0, 0xffff)
    driver = _str(dev, 'driver', where, None, _NAME_RE)
    kernel = QAT_SYSFS.get(device) if vendor == 0x8086 else None
    where += ': qat'
    if kernel is None:
        if raw is None:
            return None
        raise ProfileError(
            '%s: %04x:%04x has no qat/ in sysfs: only QAT PFs of the 4xxx, '
            '420xx and 6xxx drivers have it (8086:%s)'
            % (where, vendor, device,
               ', '.join('%04x' % d for d in sorted(QAT_SYSFS))))
    kernel_driver, services, most = kernel
    if driver != kernel_driver:
        if raw is None:
            return None
        raise ProfileError('%s: qat/ exists only while the kernel driver %s '
                           'is bound (driver: %s)'
                           % (where, kernel_driver, driver or 'none'))
    raw = {} if raw is None else raw
    _mapping(raw, where, _QAT_KEYS)
    state = _str(raw, 'state', where, 'up')
    if state not in ('up', 'down'):
        raise ProfileError('%s: state %r is not up or down' % (where, state))
    sriov = dev.get('sriov')
    if state == 'down' and isinstance(sriov, dict) and _int(
            sriov, 'numvfs', where, 0, 0xffff, 0):
        raise ProfileError('%s: state is down but VFs are enabled: the '
                           'kernel removes a QAT device\'s VFs when it goes '
                           'down' % where)
    cfg_services = _str(raw, 'cfg_services', where, _QAT_DEFAULT_SERVICES)
    tokens = cfg_services.split(';')
    if (not set(tokens) <= set(services) or len(set(tokens)) != len(tokens)
            or len(tokens) > most or ('dcc' in tokens and len(tokens) > 1)):
        raise ProfileError(
            '%s: cfg_services %r is not what a %s device takes: up to %d of '
            '%s, each once, dcc alone'
            % (where, cfg_services, kernel_driver, most,
               ', '.join(services)))
    auto_reset = raw.get('auto_reset', False)
    if not isinstance(auto_reset, bool):
        raise ProfileError('%s: auto_reset must be true or false, not %r'
                           % (where, auto_reset))
    return {'cfg_services': cfg_services, 'state': state,
            'pm_idle_enabled': _int(raw, 'pm_idle_enabled', where, 0, 1, 1),
            'auto_reset': auto_reset}


def _device(raw: Any, index: int) -> dict:
    where = 'device #%d' % index
    if not isinstance(raw, dict):
        raise ProfileError('%s must be a mapping' % where)
    if raw.get('address') is None:
        raise ProfileError('%s: missing required field %r'
                           % (where, 'address'))
    address = _address(raw['address'], where)
    where = 'device %s' % address
    _mapping(raw, where, _DEVICE_KEYS)
    vendor = _int(raw, 'vendor', where, 0, 0xffff)
    label = raw.get('label')
    return {
        'address': address,
        'vendor': vendor,
        'device': _int(raw, 'device', where, 0, 0xffff),
        'class': _int(raw, 'class', where, 0, 0xffffff),
        'subsystem_vendor': _int(raw, 'subsystem_vendor', where, 0, 0xffff,
                                 vendor),
        'subsystem_device': _int(raw, 'subsystem_device', where, 0, 0xffff,
                                 0),
        'revision': _int(raw, 'revision', where, 0, 0xff, 0),
        'numa_node': _int(raw, 'numa_node', where, -1, 1023, -1),
        'driver': _str(raw, 'driver', where, None, _NAME_RE),
        'iommu_group': _iommu_group(raw, where),
        'parent': (None if raw.get('parent') is None
                   else _address(raw['parent'], where + ': parent')),
        'label': None if label is None else str(label),
        'sriov': _sriov(raw.get('sriov'), where),
        'fpga': _fpga(raw, where),
        'xilinx': _xilinx(raw.get('xilinx'), where),
        'mdev_types': _mdev_types(raw.get('mdev_types'), where),
        'net': _net(raw.get('net'), where),
        'qat': _qat(raw, where),
        'nvidia_vgpu': _nvidia_vgpu(raw.get('nvidia_vgpu'), where),
    }


# -- whole profile ------------------------------------------------------------


def _normalise(raw: Any) -> dict:
    if raw is None:
        raise ProfileError('profile is empty')
    _mapping(raw, 'profile', _TOP_KEYS)
    name = _str(raw, 'name', 'profile')
    description = _str(raw, 'description', 'profile', '')
    devices_raw = raw.get('devices')
    if not isinstance(devices_raw, list):
        raise ProfileError('profile: devices must be a list of devices')
    devices = [_device(d, i) for i, d in enumerate(devices_raw)]

    by_address = {}
    for dev in devices:
        if dev['address'] in by_address:
            raise ProfileError('device %s: duplicate address'
                               % dev['address'])
        by_address[dev['address']] = dev
    for dev in devices:
        _check_parent(dev, by_address)
    _check_vfs(devices, by_address)
    _check_vgpus(devices)
    ifnames = {}
    for dev in devices:
        for ifname in dev['net'] or ():
            if ifname in ifnames:
                raise ProfileError('device %s: net: interface %s is also '
                                   'on %s' % (dev['address'], ifname,
                                              ifnames[ifname]))
            ifnames[ifname] = dev['address']
    return {'name': name, 'description': description, 'devices': devices}


def _check_parent(dev: dict, by_address: dict) -> None:
    where = 'device %s: parent' % dev['address']
    seen = {dev['address']}
    child = dev
    while child['parent'] is not None:
        parent = by_address.get(child['parent'])
        if parent is None:
            raise ProfileError('%s %s is not a device of this profile'
                               % (where, child['parent']))
        if not is_bridge(parent):
            raise ProfileError('%s %s is not a PCI bridge (class 0x0604xx)'
                               % (where, parent['address']))
        pdom, pbus, _, _ = parse_address(parent['address'])
        cdom, cbus, _, _ = parse_address(child['address'])
        # A bridge forwards to higher bus numbers only: this also rules
        # out cycles.
        if pdom != cdom or cbus <= pbus:
            raise ProfileError('%s: %s must be on a higher bus of the same '
                               'domain than its bridge %s'
                               % (where, child['address'],
                                  parent['address']))
        if parent['address'] in seen:
            raise ProfileError('%s: cycle through %s'
                               % (where, parent['address']))
        seen.add(parent['address'])
        child = parent


def _check_vgpus(devices: list) -> None:
    """Mediated devices unique on the host; vendor-VFIO state on VFs."""
    seen = {}
    for dev in devices:
        where = 'device %s' % dev['address']
        sections = [dev['mdev_types'] or {}]
        if dev['sriov']:
            sections.append(dev['sriov']['vf_mdev_types'] or {})
        for types in sections:
            for type_id, attrs in types.items():
                for mdev in attrs['devices']:
                    if mdev in seen:
                        raise ProfileError(
                            '%s: mdev_types: %s: mediated device %s is also '
                            'on %s (an mdev uuid is unique on a host)'
                            % (where, type_id, mdev, seen[mdev]))
                    seen[mdev] = dev['address']
        if sections[1:] and any(t['devices'] for t in sections[1].values()):
            raise ProfileError('%s: sriov: vf_mdev_types cannot list '
                               'devices (every VF would hold the same '
                               'uuids)' % where)
        vgpu = dev['nvidia_vgpu']
        if vgpu is None:
            continue
        numvfs = dev['sriov']['numvfs'] if dev['sriov'] else 0
        if not dev['sriov']:
            raise ProfileError('%s: nvidia_vgpu needs sriov: only VFs carry '
                               'nvidia/current_vgpu_type' % where)
        for index in vgpu['current']:
            if index >= numvfs:
                raise ProfileError('%s: nvidia_vgpu: current: VF %d does not '
                                   'exist (numvfs %d)'
                                   % (where, index, numvfs))


def _check_vfs(devices: list, by_address: dict) -> None:
    owner = {}
    for dev in devices:
        if not dev['sriov']:
            continue
        where = 'device %s: sriov' % dev['address']
        try:
            addresses = vf_addresses(dev['address'], dev['sriov'])
        except ValueError as exc:
            raise ProfileError('%s: %s' % (where, exc))
        for n, vf in enumerate(addresses):
            if vf in by_address or vf in owner:
                other = ('device %s' % vf if vf in by_address
                         else 'a VF of %s' % owner[vf])
                raise ProfileError('%s: VF %d address %s collides with %s'
                                   % (where, n, vf, other))
            owner[vf] = dev['address']


# -- synthetic hosts ----------------------------------------------------------

_SYNTH_ACCELERATORS = (
    {'vendor': 0x8086, 'device': 0x4940, 'class': 0x0b4000,
     'subsystem_device': 0x0000, 'revision': 0x40, 'driver': '4xxx',
     'sriov': {'totalvfs': 16, 'vf_device': 0x4941},
     'qat': {'cfg_services': 'sym;asym', 'state': 'up'}},
    {'vendor': 0x8086, 'device': 0x1592, 'class': 0x020000,
     'subsystem_device': 0x0002, 'revision': 0x02, 'driver': 'ice',
     'sriov': {'totalvfs': 128, 'vf_device': 0x1889, 'vf_driver': 'iavf'},
     'net': True},
    {'vendor': 0x10de, 'device': 0x20b0, 'class': 0x030200,
     'subsystem_device': 0x134f, 'revision': 0xa1, 'driver': 'nvidia',
     'sriov': {'totalvfs': 16, 'vf_device': 0x20b0, 'vf_driver': 'nvidia'}},
    {'vendor': 0x8086, 'device': 0x09c4, 'class': 0x120000,
     'subsystem_device': 0x0000, 'revision': 0x01,
     'driver': 'intel-fpga-pci',
     'sriov': {'totalvfs': 1, 'vf_device': 0x09c5,
               'vf_driver': 'intel-fpga-pci'},
     'fpga': {'layout': 'opae',
              'interface_id': '9346116d-a52d-5ca8-b06a-a9a389ef7c8d',
              'afu_id': 'd8424dc4-a4a3-c413-f89e-433683f9040b'}},
)

_SYNTH_NOISE = (
    {'vendor': 0x144d, 'device': 0xa808, 'class': 0x010802,
     'subsystem_device': 0xa801, 'driver': 'nvme'},
    {'vendor': 0x8086, 'device': 0xa182, 'class': 0x010601,
     'subsystem_device': 0x7270, 'revision': 0x09, 'driver': 'ahci'},
    {'vendor': 0x1af4, 'device': 0x1000, 'class': 0x020000,
     'subsystem_device': 0x0001, 'driver': 'virtio-pci'},
    {'vendor': 0x1a03, 'device': 0x2000, 'class': 0x030000,
     'subsystem_device': 0x2000, 'revision': 0x41, 'driver': 'ast'},
    {'vendor': 0x8086, 'device': 0xa1a3, 'class': 0x0c0500,
     'subsystem_device': 0x7270, 'revision': 0x09, 'driver': 'i801_smbus'},
    {'vendor': 0x8086, 'device': 0xa1af, 'class': 0x0c0330,
     'subsystem_device': 0x7270, 'revision': 0x09, 'driver': 'xhci_hcd'},
)
_HOST_BRIDGE = {'vendor': 0x8086, 'device': 0x2020, 'class': 0x060000,
                'subsystem_device': 0x0000, 'revision': 0x04}
# Noise lives on buses 00-0f of domain 0, accelerators from bus 10 on.
_NOISE_BUSES = 0x10


def synthetic_profile(accelerator_pfs: int = 8, vfs_per_pf: int = 64,
                      noise: int = 40, name: str = 'synthetic') -> dict:
    """A big, deterministic host for benchmarks.

    Accelerator PFs cycle through QAT 4xxx, E810, A100 and PAC Arria 10,
    each with ``vfs_per_pf`` VFs enabled, alternating NUMA nodes, one bus
    (or more when the VFs need it) per PF, moving to the next PCI domain
    when a domain's buses run out. ``noise`` functions of ordinary
    platform devices (host bridge, NVMe, AHCI, virtio, BMC VGA, SMBus,
    xHCI) are added on the low buses. The host has exactly
    ``accelerator_pfs * (1 + vfs_per_pf) + noise`` functions.
    """
    for arg, value, hi in (('accelerator_pfs', accelerator_pfs, 4096),
                           ('vfs_per_pf', vfs_per_pf, 0xff00),
                           ('noise', noise, _NOISE_BUSES * 256)):
        if isinstance(value, bool) or not isinstance(value, int) or not (
                0 <= value <= hi):
            raise ValueError('%s must be an integer in [0, %d], not %r'
                             % (arg, hi, value))
    devices = []
    for i in range(noise):
        template = (_HOST_BRIDGE if i == 0 else
                    _SYNTH_NOISE[(i - 1) % len(_SYNTH_NOISE)])
        dev = dict(template, address=format_address(0, i >> 8,
                                                    (i >> 3) & 0x1f, i & 7),
                   numa_node=0)
        devices.append(dev)
    # Buses a PF and its VFs span (offset 1, stride 1 from devfn 0).
    span = vfs_per_pf // 256 + 1
    domain, bus = 0, _NOISE_BUSES
    for i in range(accelerator_pfs):
        if bus + span > 0x100:
            domain, bus = domain + 1, _NOISE_BUSES
        template = _SYNTH_ACCELERATORS[i % len(_SYNTH_ACCELERATORS)]
        dev = dict(template, address=format_address(domain, bus, 0, 0),
                   numa_node=i % 2)
        sriov = dict(template['sriov'])
        if vfs_per_pf:
            sriov['totalvfs'] = max(sriov['totalvfs'], vfs_per_pf)
            sriov['numvfs'] = vfs_per_pf
            dev['sriov'] = sriov
        else:
            del dev['sriov']
        if dev.get('net'):
            dev['net'] = ['ens%df0' % (i + 1)]
        devices.append(dev)
        bus += span
    return normalise_profile({
        'name': name,
        'description': 'synthetic host: %d accelerator PFs x %d VFs + %d '
                       'other functions' % (accelerator_pfs, vfs_per_pf,
                                            noise),
        'devices': devices})
