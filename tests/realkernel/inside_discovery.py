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

"""Discovery on a real kernel's sysfs (runs inside L1).

``cyborg-nova discover`` with the ``nic_sriov`` driver (the igb PF mapped
to physnet1) and the ``generic`` driver (the NVMe PF by an operator's
matcher), compared with what the kernel shows: the VFs by their
``virtfnN`` links (the project names them from ``sriov_offset`` and
``sriov_stride``), the VF count, NUMA node, IOMMU group and driver.
"""

import json
import time

from cyborg_drivers import aer
from tests.realkernel import l1


def discovered() -> dict:
    started = time.monotonic()
    rc, out, err = l1.cli('discover', '--driver', 'nic_sriov', '--driver',
                          'generic', '--long', '-f', 'json')
    l1.record('discover_cli_s', l1.elapsed(started))
    assert rc == 0, err
    return {a['address']: a for a in json.loads(out)}


def check_as_the_kernel_shows(found: dict, pf: str) -> None:
    assert found['units'] == l1.vfs(pf)
    assert found['total'] == len(l1.vfs(pf)) == int(
        l1.attr(pf, 'sriov_numvfs')) == 2
    assert found['numa_node'] == l1.numa_node(pf)
    assert found['iommu_group'] == l1.iommu_group(pf)
    assert found['kernel_driver'] == l1.driver(pf)
    assert found['vendor_id'] == l1.attr(pf, 'vendor')[2:]
    assert found['product_id'] == l1.attr(pf, 'device')[2:]
    assert found['class_code'] == l1.attr(pf, 'class')


def test_nic_sriov_finds_the_igb_pf_with_its_vfs():
    pf = l1.pf(l1.IGB)
    found = discovered()
    assert found[pf]['driver'] == 'nic_sriov'
    assert found[pf]['resource_class'] == 'CUSTOM_NIC'
    assert {'CUSTOM_VF', 'CUSTOM_PHYSNET1', 'HW_NIC_SRIOV'} <= set(
        found[pf]['traits'])
    check_as_the_kernel_shows(found[pf], pf)
    # Each VF in an IOMMU group of its own: each can go to a guest alone.
    groups = [l1.iommu_group(vf) for vf in l1.vfs(pf)]
    assert len(set(groups)) == len(groups)
    assert {l1.driver(vf) for vf in l1.vfs(pf)} == {'igbvf'}


def test_generic_finds_the_nvme_pf_by_the_operators_matcher():
    pf = l1.pf(l1.NVME)
    found = discovered()
    assert found[pf]['driver'] == 'generic'
    assert found[pf]['resource_class'] == 'CUSTOM_NVME_FN'
    check_as_the_kernel_shows(found[pf], pf)


def test_nothing_else_is_claimed():
    # L1's other functions (bridges, root ports, the virtio NIC, the
    # VFs themselves) are no accelerators.
    assert sorted(discovered()) == sorted([l1.pf(l1.IGB), l1.pf(l1.NVME)])


def test_aer_counts_read_as_the_kernel_shows_them():
    """The igb PF's and VFs' AER counts, against L1's own sysfs files.

    A function with the kernel's ``aer_dev_*`` files is read as their
    ``TOTAL_ERR_*`` lines say; one without them is unknown, with the
    reason, never 0.
    """
    pf = l1.pf(l1.IGB)
    found = discovered()[pf]
    shown = {c['address']: c for c in found['aer']}
    # The root port above it has AER (QEMU's pcie-root-port): read too,
    # as the errors of the igb's link.
    port = aer.upstream_port(l1.DEVICES, pf)
    assert sorted(shown) == sorted([pf] + l1.vfs(pf) + [port])
    assert [a for a, c in shown.items() if c['upstream_port']] == [port]
    files = {'fatal': ('aer_dev_fatal', 'TOTAL_ERR_FATAL'),
             'nonfatal': ('aer_dev_nonfatal', 'TOTAL_ERR_NONFATAL'),
             'correctable': ('aer_dev_correctable', 'TOTAL_ERR_COR')}
    seen = {}
    for address, counts in shown.items():
        path = '%s/%s/aer_dev_fatal' % (l1.DEVICES, address)
        try:
            open(path).close()
        except FileNotFoundError:
            assert not counts['known'] and counts['fatal'] is None
            assert 'AER' in counts['reason'], counts
            seen[address] = 'no AER files'
            continue
        for severity, (name, total) in files.items():
            lines = dict(line.rsplit(' ', 1) for line in l1.read(
                '%s/%s/%s' % (l1.DEVICES, address, name)).splitlines())
            assert counts[severity] == int(lines[total]), (address,
                                                           severity)
        seen[address] = 'read: %s' % {s: counts[s] for s in files}
    l1.record('igb_aer_as_read', seen)
