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

"""The supported Nova releases are the same wherever they are named.

The test command (``tools/run-tests.sh``), the venvs it builds
(``tools/setup-nova-venv.sh``), ``tox.ini``, ``setup.cfg``'s ``nova`` extra,
the install guide and the README each name the supported range; a release
added to or dropped from one of them and not the others fails here.
"""

import configparser
import os
import re

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def read(*path: str) -> str:
    with open(os.path.join(TOP, *path)) as f:
        return f.read()


def series_in_ci() -> list[int]:
    """NOVA_SERIES of the test command, newest first."""
    match = re.search(r'^NOVA_SERIES=\(([\d ]+)\)$',
                      read('tools', 'run-tests.sh'), re.MULTILINE)
    assert match, 'no NOVA_SERIES=(...) line in tools/run-tests.sh'
    return [int(n) for n in match.group(1).split()]


def venv_pins() -> dict[int, list[str]]:
    """series -> pins of tools/setup-nova-venv.sh."""
    script = read('tools', 'setup-nova-venv.sh')
    found = {}
    for series, body in re.findall(r'^\s+(\d+)\) pins=\(([^)]*)\) ;;$',
                                   script, re.MULTILINE):
        found[int(series)] = re.findall(r"'([^']+)'", body)
    return found


def tox_pins() -> dict[int, list[str]]:
    """series -> the deps of [testenv:novaNN] that are not -r lines."""
    tox = configparser.ConfigParser(interpolation=None)
    tox.read_string(read('tox.ini'))
    found = {}
    for section in tox.sections():
        match = re.fullmatch(r'testenv:nova(\d+)', section)
        if match:
            found[int(match.group(1))] = [
                line.strip() for line in tox[section]['deps'].splitlines()
                if line.strip() and not line.strip().startswith('-r')]
    return found


def test_the_series_are_consecutive_and_newest_first():
    series = series_in_ci()
    assert series == list(range(series[0], series[-1] - 1, -1)), series


def test_every_tested_series_has_a_venv_recipe_and_a_tox_env():
    series = sorted(series_in_ci())
    assert sorted(venv_pins()) == series
    assert sorted(tox_pins()) == series


def test_tox_and_the_venv_script_pin_the_same_releases():
    harness = {'pytest>=8.0', 'oslotest', 'testtools', 'wsgi-intercept',
               'fixtures', 'pytest-timeout', 'pytest-rerunfailures'}
    tox = tox_pins()
    for series, pins in venv_pins().items():
        assert set(tox[series]) - harness == set(pins), series
        assert 'nova==%d.' % series in ' '.join(pins), (series, pins)


def test_the_nova_extra_allows_exactly_the_tested_range():
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read_string(read('setup.cfg'))
    spec = cfg['extras']['nova'].strip()
    series = series_in_ci()
    assert spec == 'nova>=%d.0.0,<%d' % (series[-1], series[0] + 1), spec


def test_the_install_guide_lists_the_tested_releases():
    guide = read('doc', 'source', 'install.rst')
    series = series_in_ci()
    assert ('supports Nova %d to Nova %d' % (series[-1], series[0])
            in guide)
    assert 'nova>=%d.0.0,<%d' % (series[-1], series[0] + 1) in guide
    pins = venv_pins()
    for n in series:
        nova = next(p for p in pins[n] if p.startswith('nova=='))
        placement = next(p for p in pins[n]
                         if p.startswith('openstack-placement=='))
        row = 'nova %s, openstack-placement %s' % (
            nova.split('==')[1], placement.split('==')[1])
        assert row in guide, row
        assert '``nova%d``' % n in guide or '``tox -e nova%d``' % n in guide


def test_the_readme_names_every_tested_release():
    readme = read('README.md')
    for n in series_in_ci():
        assert '`nova%d`' % n in readme, n
        assert 'Nova %d' % n in readme, n
