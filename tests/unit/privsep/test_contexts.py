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

"""The privsep contexts, their documented capabilities, and entrypoints."""

import importlib
import inspect
import json
import os
import pkgutil
import re
import subprocess
import sys

from oslo_config import cfg
from oslo_privsep import capabilities
from oslo_privsep import priv_context
import pytest

import privsep

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
DOC = os.path.join(TOP, 'doc', 'source', 'admin', 'privsep.rst')
# Anything that could let a caller name a file or a command.
FORBIDDEN = re.compile(r'path|file|cmd|command', re.I)


def contexts():
    return {name: value for name, value in vars(privsep).items()
            if isinstance(value, priv_context.PrivContext)}


def modules():
    """Every module of the privsep package, imported."""
    found = [privsep]
    for info in pkgutil.iter_modules(privsep.__path__):
        found.append(importlib.import_module('privsep.' + info.name))
    return found


def entrypoints():
    """``(qualified name, context, undecorated function)`` of each one."""
    found = []
    all_contexts = list(contexts().values())
    for module in modules():
        for name, value in vars(module).items():
            for context in all_contexts:
                if context.is_entrypoint(value):
                    func = value.args[0] if hasattr(value, 'args') else value
                    found.append(('%s.%s' % (module.__name__, name),
                                  context, func))
    return found


def documented_contexts():
    """The rows of the ``privsep-contexts`` list-table in privsep.rst."""
    with open(DOC) as f:
        lines = f.read().splitlines()
    start = lines.index('   :name: privsep-contexts')
    rows = []
    for line in lines[start + 1:]:
        if line and not line.startswith(' '):
            break
        if line.startswith('   * - '):
            rows.append([line[7:]])
        elif line.startswith('     - '):
            rows[-1].append(line[7:])
        elif rows and line.strip():
            rows[-1][-1] += ' ' + line.strip()
    header, *body = rows
    assert header[:3] == ['Context', 'Config section', 'Capabilities']
    table = {}
    for row in body:
        context = re.fullmatch(r'``privsep\.(\w+)``', row[0]).group(1)
        section = re.fullmatch(r'``\[(\w+)\]``', row[1]).group(1)
        table[context] = (section, set(re.findall(r'CAP_[A-Z_]+', row[2])))
    return table


_DECLARED = """
import json
from oslo_config import cfg
from oslo_privsep import capabilities, priv_context
import privsep
print(json.dumps({
    name: [value.cfg_section,
           sorted(capabilities.CAPS_BYVALUE[c]
                  for c in cfg.CONF[value.cfg_section].capabilities)]
    for name, value in vars(privsep).items()
    if isinstance(value, priv_context.PrivContext)}))
"""


def test_every_context_documented_with_its_capabilities():
    table = documented_contexts()
    # What the daemon reads when it drops its privileges, as the package
    # declares it: read in a fresh interpreter, because privsep test
    # fixtures (e.g. oslo.privsep's UnprivilegedPrivsepFixture) change
    # the capabilities' defaults in this process's global config.
    proc = subprocess.run([sys.executable, '-c', _DECLARED],
                          capture_output=True, text=True, cwd=TOP,
                          env=dict(os.environ, PYTHONPATH=TOP),
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    actual = {name: (section, set(caps)) for name, (section, caps)
              in json.loads(proc.stdout.splitlines()[-1]).items()}
    assert actual == table


def test_contexts_are_narrow_and_have_own_sections():
    found = contexts()
    assert {'sysfs_admin', 'nova_config', 'libvirt_hotplug',
            'net_admin', 'nvme_admin'} <= set(found)
    sections = [c.cfg_section for c in found.values()]
    assert len(set(sections)) == len(sections)
    for name, context in found.items():
        assert context.pypath == 'privsep.' + name
        assert 'privsep' not in sections
        caps = cfg.CONF[context.cfg_section].capabilities
        # The kernel sends NVMe admin commands only for CAP_SYS_ADMIN;
        # no other context may have it.
        assert (capabilities.CAP_SYS_ADMIN not in caps
                or name == 'nvme_admin'), name


def test_contexts_only_in_the_package_init():
    for module in modules()[1:]:
        for name, value in vars(module).items():
            assert not isinstance(value, priv_context.PrivContext) or \
                value is getattr(privsep, name, None), (module, name)


def test_entrypoints_take_no_paths_or_commands():
    found = entrypoints()
    names = {name for name, _, _ in found}
    assert {'privsep.pci.bind_vfio', 'privsep.pci.unbind',
            'privsep.pci.set_num_vfs', 'privsep.pci.reset_function',
            'privsep.net.reset_vf_settings', 'privsep.mdev.create',
            'privsep.nvme.format_namespaces',
            'privsep.mdev.remove', 'privsep.qat.set_services',
            'privsep.nova_conf.write_device_spec'} <= names
    for name, _, func in found:
        params = inspect.signature(func).parameters
        bad = [p for p in params if FORBIDDEN.search(p)]
        assert not bad, '%s takes %s' % (name, ', '.join(bad))
        assert 'sysfs_root' not in params, name
        assert not any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
                       for p in params.values()), name


@pytest.mark.parametrize('name, inner', [
    ('privsep.pci.bind_vfio', '_bind_vfio'),
    ('privsep.pci.unbind', '_unbind'),
    ('privsep.pci.set_num_vfs', '_set_num_vfs'),
    ('privsep.pci.reset_function', '_reset_function'),
    ('privsep.net.reset_vf_settings', '_reset_vf_settings'),
    ('privsep.nvme.format_namespaces', '_format_namespaces'),
    ('privsep.mdev.create', '_create'),
    ('privsep.mdev.remove', '_remove'),
    ('privsep.qat.set_services', '_set_services'),
    ('privsep.nova_conf.write_device_spec', '_write_device_spec'),
])
def test_each_entrypoint_has_a_testable_inner_function(name, inner):
    module = importlib.import_module(name.rpartition('.')[0])
    params = list(inspect.signature(getattr(module, inner)).parameters)
    assert params[0] == 'sysfs_root'
    outer = [f for n, _, f in entrypoints() if n == name][0]
    assert list(inspect.signature(outer).parameters) == [
        p for p in params[1:] if p not in (
            'spec_file', 'group', 'sriov_manage', 'sriov_manage_timeout',
            'run', 'opener', 'wait')]
