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

"""A NIC VF's settings on its PF, as a new tenant should find them.

What the host set for a VF through its PF (``ip link set <pf> vf N``:
MAC, VLAN and QoS, spoof checking, trust, rate limits, link state)
outlives the guest that used it, and a function-level reset of the VF
does not clear it: the PF's driver keeps it. The scrub of a freed NIC VF
puts every one of them back to the kernel's defaults through rtnetlink
(iproute2's ``ip``), in the ``net_admin`` context (CAP_NET_ADMIN only).
The caller names the VF by its PCI address alone; the PF's interface and
the VF's index come from sysfs.
"""

from __future__ import annotations

import os
import re
import subprocess
from typing import Callable

import privsep
from privsep import _common

#: Each setting's default, as ``ip link set dev PF vf N`` words, and its
#: name for the result. The order matters: a zero MAC is refused by some
#: drivers while spoof checking is on with a MAC set, so the MAC and VLAN
#: go first.
DEFAULTS = (
    ('vlan', ('vlan', '0', 'qos', '0')),
    ('mac', ('mac', '00:00:00:00:00:00')),
    ('spoofchk', ('spoofchk', 'on')),
    ('trust', ('trust', 'off')),
    ('rate', ('max_tx_rate', '0', 'min_tx_rate', '0')),
    ('link_state', ('state', 'auto')),
)
#: How long one ``ip`` call may take.
_TIMEOUT = 30
#: rtnetlink's answer when the PF's driver has no such VF setting.
_UNSUPPORTED = re.compile(r'Operation not supported|not supported', re.I)


@privsep.net_admin.entrypoint
def reset_vf_settings(address: str) -> dict[str, str]:
    """Put the settings of the VF at ``address`` back to their defaults.

    :returns: each setting (``vlan``, ``mac``, ``spoofchk``, ``trust``,
        ``rate``, ``link_state``) and what became of it: ``reset``, or
        ``not supported`` where the PF's driver has no such setting.
    :raises InvalidArgument: (or a subclass) a bad or unknown address, or
        a function that is not a VF; nothing was changed.
    :raises NotPossible: the PF has no network interface (no driver), or
        the kernel refused a setting (the message has its answer);
        settings before it were reset.
    """
    return _reset_vf_settings(_common.sysfs_root(), address)


def vf_of(sysfs_root: str, address: str) -> tuple[str, int]:
    """(the PF's interface name, the VF's index) of VF ``address``.

    :raises InvalidArgument: not a VF (no ``physfn``), or not among its
        PF's ``virtfn*`` links.
    :raises NotPossible: the PF has no network interface.
    """
    dev = _common.device_dir(sysfs_root, address)
    physfn = os.path.join(dev, 'physfn')
    if not os.path.islink(physfn):
        raise privsep.InvalidArgument(
            '%s is not a VF (it has no physfn): only a VF has settings on '
            'its PF' % address)
    pf_dir = os.path.realpath(physfn)
    me = os.path.realpath(dev)
    index = None
    for name in os.listdir(pf_dir):
        if (re.fullmatch(r'virtfn\d+', name)
                and os.path.realpath(os.path.join(pf_dir, name)) == me):
            index = int(name[len('virtfn'):])
    if index is None:
        raise privsep.InvalidArgument(
            '%s is not among the VFs of its PF %s'
            % (address, os.path.basename(pf_dir)))
    try:
        names = sorted(os.listdir(os.path.join(pf_dir, 'net')))
    except OSError:
        names = []
    if len(names) != 1:
        raise privsep.NotPossible(
            'the PF %s of VF %s has %s network interface, so its VF '
            'settings cannot be reached (is its driver bound?)'
            % (os.path.basename(pf_dir), address,
               'no' if not names else 'more than one'))
    return _common.reject_path_like('interface', names[0]), index


def _ip(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True,
                          timeout=_TIMEOUT, check=False)


def _reset_vf_settings(sysfs_root: str, address: str,
                       run: Callable[[list[str]], object] = _ip
                       ) -> dict[str, str]:
    pf, index = vf_of(sysfs_root, address)
    done = {}
    for name, words in DEFAULTS:
        argv = ['ip', 'link', 'set', 'dev', pf, 'vf', str(index)]
        proc = run(argv + list(words))
        if proc.returncode == 0:
            done[name] = 'reset'
            continue
        answer = (proc.stderr or proc.stdout or '').strip()
        if _UNSUPPORTED.search(answer):
            done[name] = 'not supported'
            continue
        raise privsep.NotPossible(
            'resetting %s of VF %s (%s vf %d) failed: %s'
            % (name, address, pf, index, answer or 'exit code %d'
               % proc.returncode))
    return done
