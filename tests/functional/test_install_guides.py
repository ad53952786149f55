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

"""The install guide (``doc/source/install.rst``), command by command.

The release is built with the guide's command, and the guide's commands
for a virtualenv that holds Nova are run, as written, in a fresh
virtualenv into which Nova 34 was installed the way kolla's source
images install it (``pip install`` with constraints: here, this
project's own ``.venv``). Nova's own ``load_compute_driver`` then loads
``cyborg_nova.LibvirtDriver`` there. The kolla-ansible, OpenStack-Ansible
and devstack sections are checked as far as a virtualenv reproduces
them: the ``pip`` line of kolla's image, and that the configuration each
guide writes names real options.
"""

import configparser
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest
import yaml

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
GUIDE = os.path.join(TOP, 'doc', 'source', 'install.rst')
# pip's notes about index locations that do not exist on this machine.
PIP_NOISE = re.compile(r"^WARNING: Location '.*$\n?", re.M)


def section(title):
    """The text of the guide's section ``title`` (to the next title)."""
    with open(GUIDE) as f:
        text = f.read()
    start = text.index('\n%s\n%s\n' % (title, '-' * len(title)))
    rest = text[start + 2 * len(title) + 3:]
    nxt = re.search(r'\n[^\n]+\n-{3,}\n', rest)
    return rest[:nxt.start()] if nxt else rest


def blocks(text, language):
    """The code blocks of ``text`` in ``language``, dedented."""
    found = []
    pattern = r'\.\. code-block:: %s\n\n((?:    .*\n|\n)+)' % language
    for match in re.finditer(pattern, text):
        found.append('\n'.join(line[4:] for line in
                               match.group(1).rstrip().splitlines()))
    return found


def argv(line):
    """A guide's command line as a shell would split it, globs expanded.

    The guide's lines are plain: words, quotes and globs, nothing a
    shell has to run.
    """
    words = []
    for word in shlex.split(line):
        words += sorted(glob.glob(word)) or [word] if '*' in word else [word]
    return words


def run(cmd, **kwargs):
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK='1',
               PYTHONWARNINGS='ignore')
    env.update(kwargs.pop('env', {}))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env,
                          timeout=kwargs.pop('timeout', 300), **kwargs)
    proc.stderr = PIP_NOISE.sub('', proc.stderr)
    return proc


@pytest.fixture(scope='module')
def release(tmp_path_factory):
    """The release, built with the guide's command."""
    out = tmp_path_factory.mktemp('dist')
    commands = [line.strip()[2:]
                for line in section('The release').splitlines()
                if line.strip().startswith('$ ')]
    assert commands == ['./tools/setup-env.sh demo',
                        './tools/build-release.sh'], commands
    # setup-env.sh has run: the test runs in its venv.
    proc = run([os.path.join(TOP, 'tools', 'build-release.sh'), str(out)],
               cwd=TOP, env={'CYBORG_NOVA_VENV': sys.prefix})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_release_has_a_real_version(release):
    wheels = glob.glob(str(release / 'cyborg_nova-*-py3-none-any.whl'))
    assert len(wheels) == 1, wheels
    version = os.path.basename(wheels[0]).split('-')[1]
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(TOP, 'setup.cfg'))
    target = cfg.get('metadata', 'version')
    # pbr: exactly setup.cfg's version on its tag, <version>.devN before.
    assert re.fullmatch(re.escape(target) + r'(\.dev\d+)?', version), (
        version, target)
    assert os.path.isfile(release / ('cyborg-nova-%s.tar.gz' % version))
    notes = (release / ('RELEASENOTES-%s.rst' % version)).read_text()
    # reno's report carries the notes of releasenotes/notes.
    assert 'Scrub before reuse' in notes or 'scrub' in notes.lower()
    # Nothing the build made is left in the source tree.
    for left in ('build', 'RELEASENOTES.rst', 'cyborg_nova.egg-info',
                 os.path.join('releasenotes', 'notes', 'reno.cache')):
        assert not os.path.exists(os.path.join(TOP, left)), left


@pytest.fixture(scope='module')
def nova_venv(tmp_path_factory):
    """A fresh virtualenv with Nova 34, installed as kolla installs it."""
    venv = tmp_path_factory.mktemp('nova-venv') / 'venv'
    constraints = venv.parent / 'upper-constraints.txt'
    freeze = run([sys.executable, '-m', 'pip', 'freeze', '--all'])
    assert freeze.returncode == 0, freeze.stderr
    # This project's venv stands in for the release's upper constraints.
    constraints.write_text(''.join(
        line + '\n' for line in freeze.stdout.splitlines()
        if '==' in line and not line.lower().startswith('cyborg')))
    python = os.path.join(sys.base_prefix, 'bin', 'python3')
    proc = run([python, '-m', 'venv', str(venv)])
    assert proc.returncode == 0, proc.stderr
    pip = [str(venv / 'bin' / 'python'), '-m', 'pip', 'install', '-q',
           '-c', str(constraints)]
    # libvirt-python as kolla's nova-compute image has it.
    proc = run(pip + ['nova', 'libvirt-python'], timeout=900)
    assert proc.returncode == 0, proc.stderr
    return venv


def installed(venv):
    proc = run([str(venv / 'bin' / 'python'), '-m', 'pip', 'list',
                '--format=freeze'])
    assert proc.returncode == 0, proc.stderr
    return dict(line.lower().split('==') for line in proc.stdout.split())


def test_guide_commands_in_a_venv_that_holds_nova(release, nova_venv):
    before = installed(nova_venv)
    assert before['nova'].startswith('34.'), before['nova']
    wheel = glob.glob(str(release / 'cyborg_nova-*.whl'))[0]
    text = section('Into the virtualenv that holds Nova')
    commands = [line.strip()[2:] for line in blocks(text, 'console')[0]
                .splitlines() if line.strip().startswith('$ ')]
    assert len(commands) == 3, commands
    for command in commands:
        command = command.replace('<nova venv>', str(nova_venv)).replace(
            'cyborg_nova-<version>-py3-none-any.whl', wheel)
        proc = run(argv(command), cwd=str(release))
        assert proc.returncode == 0, (command, proc.stdout, proc.stderr)
    # The last one printed the release's version.
    version = os.path.basename(wheel).split('-')[1]
    assert proc.stdout.split() == ['cyborg-nova', version], proc.stdout
    after = installed(nova_venv)
    # pip added cyborg-nova and what was missing, and changed nothing.
    assert after['cyborg-nova'] == version
    changed = {name: (before[name], after[name]) for name in before
               if after.get(name) != before[name]}
    assert changed == {}, changed
    assert set(after) - set(before) <= {
        'cyborg-nova', 'pyudev', 'cheroot', 'jaraco.functools',
        'more-itertools', 'jaraco-functools'}, set(after) - set(before)
    proc = run([str(nova_venv / 'bin' / 'python'), '-m', 'pip', 'check'])
    assert proc.returncode == 0, proc.stdout
    # Nova's own loader, as nova-compute calls it at start.
    proc = run([str(nova_venv / 'bin' / 'python'), '-c', '''
import os
import nova.conf
from nova.virt import driver, fake
import cyborg_nova
conf = nova.conf.CONF
conf([], project='nova', default_config_files=[])
conf.set_override('compute_driver', 'cyborg_nova.LibvirtDriver')
loaded = driver.load_compute_driver(fake.FakeVirtAPI())
print(type(loaded).__module__, type(loaded).__name__)
print(os.path.dirname(os.path.dirname(cyborg_nova.__file__)))
'''], cwd=str(release))
    assert proc.returncode == 0, proc.stderr
    loaded, where = proc.stdout.splitlines()
    assert loaded == 'cyborg_nova.virt.libvirt LibvirtDriver'
    # The wheel's copy, not this source tree.
    assert where.startswith(str(nova_venv)), where


def test_kolla_image_pip_line_and_config(release, nova_venv, tmp_path):
    text = section('kolla-ansible')
    jinja = blocks(text, 'jinja')[0]
    run_line = [line for line in jinja.splitlines()
                if line.startswith('RUN ')]
    assert len(run_line) == 1, jinja
    # The plugin directory as kolla-build archives it, the venv first on
    # PATH as in kolla's images.
    plugins = tmp_path / 'plugins' / 'cyborg-nova'
    plugins.mkdir(parents=True)
    shutil.copy(glob.glob(str(release / 'cyborg_nova-*.whl'))[0], plugins)
    command = run_line[0][4:].replace('/plugins/', str(tmp_path) + '/'
                                      + 'plugins/')
    command += ' --force-reinstall --no-deps'
    proc = run(argv(command), env={
        'PATH': str(nova_venv / 'bin') + os.pathsep + os.environ['PATH']})
    assert proc.returncode == 0, proc.stderr
    # The configuration kolla-ansible merges into nova.conf.
    conf = tmp_path / 'nova-compute.conf'
    configs = blocks(text, 'ini')
    conf.write_text([c for c in configs if 'compute_driver' in c][0])
    parser = configparser.ConfigParser()
    parser.read(conf)
    assert parser.get('DEFAULT', 'compute_driver') == (
        'cyborg_nova.LibvirtDriver')
    assert parser.get('cyborg_nova', 'state_path').startswith(
        '/var/lib/nova/')
    # The wheel's own check of the file, from the Nova venv: no error
    # (this machine has no accelerator, so drivers may find nothing).
    proc = run([str(nova_venv / 'bin' / 'cyborg-nova'), '--config-file',
                str(conf), 'config-check'])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'error:' not in proc.stdout, proc.stdout
    assert proc.stdout.splitlines()[-1].endswith(str(conf)), proc.stdout


def test_openstack_ansible_variables():
    text = section('OpenStack-Ansible')
    variables = yaml.safe_load(blocks(text, 'yaml')[0])
    assert set(variables) == {'nova_user_pip_packages',
                              'nova_nova_conf_overrides'}
    (package,) = variables['nova_user_pip_packages']
    assert package.endswith('cyborg_nova-<version>-py3-none-any.whl')
    overrides = variables['nova_nova_conf_overrides']
    assert overrides == {
        'DEFAULT': {'compute_driver': 'cyborg_nova.LibvirtDriver'}}


def test_devstack_settings_match_the_plugin():
    text = section('devstack')
    documented = dict(re.findall(
        r'``(CYBORG_NOVA_[A-Z_]+)`` \(``([^`]*)``\)', text))
    with open(os.path.join(TOP, 'devstack', 'settings')) as f:
        settings = dict(re.findall(
            r'^(CYBORG_NOVA_[A-Z_]+)=\$\{\1:-(.*)\}$', f.read(), re.M))
    assert documented, text
    for name, default in documented.items():
        assert settings.get(name) == default, (name, default,
                                               settings.get(name))
    # Every setting an operator may change is documented, but the
    # plugin's own checkout directory.
    assert set(settings) - set(documented) == {'CYBORG_NOVA_DIR'}
