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

"""doc/source/admin/device-ids.rst: the GPU section and the page's sections.

The FPGA, QAT and NIC sections are checked against their drivers' tables
by test_intel_fpga_ids.py, test_intel_qat_ids.py and test_nic_classes.py.
``nvidia_gpu`` has no id table: it claims by vendor and class, so its
section is checked against what the driver claims and reports on the
shipped profiles, in every configuration the section names.
"""

import os
import re

from oslo_config import cfg

from cyborg_drivers import discovery
from cyborg_drivers.fake import hosttree
from cyborg_drivers import loader
from cyborg_drivers import names
from cyborg_drivers.nvidia import driver as nvidia_gpu

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
DOC = os.path.join(REPO, 'doc', 'source', 'admin', 'device-ids.rst')
# Drivers with no hardware of their own: ``generic`` reports what the
# operator describes, ``fake`` what the drivers it emulates report.
NO_IDS = {'generic', 'fake'}
NAME = re.compile(r'``(CUSTOM_[A-Z0-9_<> ]+)``')
ROW_ID = re.compile(r'``10de:([0-9a-f]{4})``')


def page():
    with open(DOC) as f:
        return f.read()


def section(name):
    text = page()
    start = text.index('.. _device-ids-%s:' % name)
    end = text.find('.. _device-ids-', start + 1)
    return text[start:] if end < 0 else text[start:end]


def rows(text):
    """The cells of every list-table row in ``text``, whitespace joined."""
    found = []
    for row in text.split('   * - ')[1:]:
        cells = row.split('\n\n')[0].split('\n     - ')
        found.append([' '.join(c.split()) for c in cells])
    return found


def case_rows():
    """The rows of the table of cases (after its header)."""
    return [r for r in rows(section('gpu'))
            if r[0].startswith('``10de``,')]


def example_rows():
    return [r for r in rows(section('gpu')) if ROW_ID.fullmatch(r[0])]


def discover(root, options=()):
    conf = cfg.ConfigOpts()
    conf([])
    drivers = loader.load(conf, ['nvidia_gpu'])
    for option, value in options:
        conf.set_override(option, value, group='cyborg_nvidia_gpu')
    return discovery.Discoverer(drivers, root).discover()


def options_of(cell):
    """``[(option, [values])]`` a configuration cell names."""
    return [(m.group(1), [v.strip() for v in m.group(2).split(',')])
            for m in re.finditer(r'``((?:enabled|vfio)_vgpu_types) = '
                                 r'([^`]+)``', cell)]


def resource_class(cell):
    return re.match(r'``([A-Z_]+)``', cell).group(1)


# -- what is claimed ---------------------------------------------------------

def test_the_claim_is_by_vendor_and_class():
    text = section('gpu')
    claim = '``%04x``, %s' % (nvidia_gpu.VENDOR_NVIDIA, ' or '.join(
        '``%04x``' % c for c in nvidia_gpu.GPU_SUBCLASSES))
    assert claim == '``10de``, ``0300`` or ``0302``'
    assert len(case_rows()) == 4
    for cells in case_rows():
        assert cells[0] == claim
    assert 'not by device id' in text


def test_any_device_id_of_those_classes_is_claimed(host_tree):
    # Device ids no table names, one per class, and NVIDIA functions of
    # other classes (HD audio 0403, "other display" 0380).
    devices = [{'address': '0000:%02x:00.0' % (0x3b + n), 'vendor': 0x10de,
                'device': 0xfff0 + n, 'class': cls << 8, 'driver': 'nvidia'}
               for n, cls in enumerate(nvidia_gpu.GPU_SUBCLASSES
                                       + (0x0403, 0x0380))]
    result = discover(host_tree({'name': 'ids', 'devices': devices}))
    claimed = {int(a.class_code, 16) >> 8 for a in result.accelerators}
    assert claimed == set(nvidia_gpu.GPU_SUBCLASSES)
    assert {a.product_id for a in result.accelerators} == {'fff0', 'fff1'}


# -- what is reported --------------------------------------------------------

# Every configuration of the shipped GPUs the section's two tables name,
# plus a type no VF can create (which holds the GPU back).
CONFIGS = [
    ('gpu-host', ()),
    ('gpu-host', (('enabled_vgpu_types', ['nvidia-223']),)),
    ('mdev-vf-host', ()),
    ('mdev-vf-host', (('enabled_vgpu_types', ['nvidia-474',
                                              'nvidia-222']),)),
    ('vgpu-vfio-host', ()),
    ('vgpu-vfio-host', (('vfio_vgpu_types', ['0000:41:00.0=1414',
                                             '10de:2bb5=1520']),)),
    ('vgpu-vfio-host', (('vfio_vgpu_types', ['0000:41:00.0=777']),)),
]


def vfio_type_names(profile):
    """{(PF address, type id): name} of a profile's vendor-VFIO GPUs."""
    found = {}
    for dev in hosttree.load_profile(hosttree.profile_path(profile))[
            'devices']:
        for type_id, name in ((dev['nvidia_vgpu'] or {}).get(
                'types') or {}).items():
            found[(dev['address'], type_id)] = name
    return found


def case_of(accelerator):
    """The index in the table of cases of the row ``accelerator`` is."""
    framework = dict(accelerator.capabilities).get('vgpu_framework')
    if accelerator.setup_required:
        return 3
    if accelerator.resource_class == names.RC_PGPU:
        return 0
    return {'mdev': 1, 'vfio': 2}[framework]


def expected_traits(cell, accelerator, profile):
    """The traits the patterns of ``cell`` give ``accelerator``."""
    pid = accelerator.product_id.upper()
    type_id = dict(accelerator.capabilities).get('vgpu_type')
    name = None
    if type_id is not None:
        mdev = [m for m in accelerator.mdev_types if m.type_id == type_id]
        name = (mdev[0].name if mdev else vfio_type_names(profile).get(
            (accelerator.address, int(type_id))))
    traits = set()
    for pattern in NAME.findall(cell):
        if '<SECOND WORD>' in pattern:
            # "for a type name of two words"
            assert 'two words' in cell
            if len(name.split()) != 2:
                continue
            pattern = pattern.replace('<SECOND WORD>', name.split()[1])
        text = (pattern.replace('<PID>', pid)
                .replace('<TYPE ID>', str(type_id))
                .replace('<NAME>', str(name)))
        assert '<' not in text, pattern
        traits.add(names.custom(text[len('CUSTOM_'):]))
    return traits


def test_every_gpu_is_reported_as_its_case_says(host_tree):
    cases = case_rows()
    seen = set()
    for profile, options in CONFIGS:
        result = discover(host_tree(profile), options)
        assert result.accelerators and not result.driver_errors
        for acc in result.accelerators:
            index = case_of(acc)
            seen.add(index)
            cells = cases[index]
            assert acc.resource_class == resource_class(cells[2])
            assert set(acc.traits) == expected_traits(cells[2], acc,
                                                      profile), (
                profile, options, acc.address)
            assert ('``setup_required``' in cells[2]) == acc.setup_required
            if index == 0:
                assert acc.units == (acc.address,)
            elif index == 1:
                assert acc.units == tuple(u.uuid for u in acc.mdev_units)
            else:
                assert set(acc.units) <= set(acc.sriov.vf_addresses)
    # Every row describes something the driver does.
    assert seen == {0, 1, 2, 3}


def test_the_documented_names_are_the_drivers():
    documented = {resource_class(cells[2]) for cells in case_rows()}
    assert documented == {names.RC_PGPU, names.RC_VGPU}
    patterns = {p for cells in case_rows() for p in NAME.findall(cells[2])}
    assert patterns == {
        'CUSTOM_NVIDIA_<PID>', 'CUSTOM_NVIDIA_<PID>_VGPU_<TYPE ID>',
        'CUSTOM_NVIDIA_<PID>_VGPU_<TYPE ID>_<NAME>',
        'CUSTOM_NVIDIA_<PID>_<SECOND WORD>', names.TRAIT_VF}


def test_the_examples_are_what_discovery_reports(host_tree):
    examples = example_rows()
    assert {ROW_ID.fullmatch(r[0]).group(1) for r in examples} == {
        '2335', '2bb5', '2331', '20f1', '1eb8'}
    for cells in examples:
        product = ROW_ID.fullmatch(cells[0]).group(1)
        profile = re.search(r'\(``([a-z0-9-]+)``\)', cells[1]).group(1)
        options = options_of(cells[2])
        assert options or cells[2] == 'nothing', cells
        result = discover(host_tree(profile), options)
        (acc,) = [a for a in result.accelerators
                  if a.product_id == product]
        reported = cells[3]
        assert acc.resource_class == resource_class(reported), cells
        assert set(acc.traits) == set(NAME.findall(reported)), cells
        units = int(re.search(r'(\d+) units?', reported).group(1))
        assert acc.total == units, cells
        assert acc.setup_required == ('setup_required' in reported), cells
        # A problem quoted in the row is the driver's, word for word.
        quoted = re.search(r'problem: ``\.\.\. ([^`]+)``', reported)
        if quoted:
            assert acc.problems[0].endswith(quoted.group(1)), cells
        else:
            assert not acc.problems or acc.setup_required, cells


# -- the page ----------------------------------------------------------------

def headings(text):
    """(label, heading) of each labelled section of the page."""
    found = []
    for m in re.finditer(r'^\.\. _(device-ids-[a-z]+):\n\n(.+)\n(=+)\n',
                         text, re.M):
        assert len(m.group(3)) == len(m.group(2)), m.group(2)
        found.append((m.group(1), m.group(2)))
    return found


def test_every_section_heading_exists():
    text = page()
    found = headings(text)
    # Every label of the page heads a section.
    assert [label for label, _ in found] == re.findall(
        r'^\.\. _(device-ids-[a-z]+):', text, re.M)
    assert [label for label, _ in found] == [
        'device-ids-gpu', 'device-ids-fpga', 'device-ids-qat',
        'device-ids-nic']
    # Every driver that claims hardware of its own has its section.
    titled = {name for _, heading in found
              for name in re.findall(r'``([a-z_]+)``', heading)}
    assert titled == set(loader.installed()) - NO_IDS
    # Each of those sections says something.
    for label, _ in found:
        body = section(label[len('device-ids-'):])
        assert '.. list-table::' in body and '   * - ' in body, label
