#!/usr/bin/env bash
# A virtualenv with one Nova release, for the Nova-harness tests
# (tests/functional/nova), with cyborg-nova installed from this tree.
#
# Usage: tools/setup-nova-venv.sh <venv-dir> <nova-series>
#   nova-series: 34 (2026.2, current), 33 (2026.1 SLURP), 32 (2025.2) or
#   31 (2025.1 SLURP)
#   PYTHON=/path/to/python3 picks the interpreter for a new venv.
#
# Then, from the top of the tree:
#   <venv-dir>/bin/pytest -q -p no:cacheprovider -W ignore tests/functional/nova
#
# Idempotent: the pinned set is installed only when <venv-dir>/.nova-deps
# (series, interpreter, pins and the flattened requirements) differs;
# cyborg-nova itself is reinstalled only when <venv-dir>/.nova-project
# (tools/project-hash.sh) differs. It is installed NON-editable, so that the
# shim module nova/virt/cyborg_nova.py lands in the venv's nova/virt (Nova
# loads compute drivers only from there; an editable install does not put
# it there). Keep the pins in step with [testenv:novaNN] in tox.ini.
set -euo pipefail

usage="usage: $0 <venv-dir> <nova-series: 31|32|33|34>"
venv=${1:?$usage}
series=${2:?$usage}
python=${PYTHON:-python3}
top=$(cd "$(dirname "$0")/.." && pwd)

case "$series" in
    34) pins=('nova==34.0.0' 'openstack-placement==16.0.0'
              'SQLAlchemy<2.1') ;;
    # placement 13, 14 and 15 read [oslo_policy] enforce_scope, which
    # oslo.policy 6 removed.
    33) pins=('nova==33.0.2' 'openstack-placement==15.0.0'
              'oslo.policy<6' 'SQLAlchemy<2.1') ;;
    32) pins=('nova==32.2.1' 'openstack-placement==14.0.0'
              'oslo.policy<6' 'SQLAlchemy<2.1') ;;
    31) pins=('nova==31.3.1' 'openstack-placement==13.0.1'
              'oslo.policy<6' 'SQLAlchemy<2.1') ;;
    *) echo "$usage" >&2; exit 2 ;;
esac
# What Nova's and Placement's functional fixtures need besides Nova.
harness=(oslotest testtools wsgi-intercept fixtures pytest-timeout
         pytest-rerunfailures)

# shellcheck source=tools/venv-lib.sh
. "$top/tools/venv-lib.sh"

if [ ! -x "$venv/bin/python" ]; then
    echo "Creating virtualenv $venv ($("$python" --version 2>&1))"
    "$python" -m venv "$venv"
fi

# The project's requirement files, flattened (-r followed), without the
# lines for projects pinned above: the series pins win (a file that
# test-requirements.txt includes may pin the current Nova).
reqs="$venv/.nova-requirements.txt"
"$venv/bin/python" - "$reqs" "$top/requirements.txt" \
    "$top/test-requirements.txt" "${pins[@]}" <<'PY'
import os
import re
import sys

out, files, pins = sys.argv[1], sys.argv[2:4], sys.argv[4:]


def name(spec):
    m = re.match(r'\s*([A-Za-z0-9][A-Za-z0-9._-]*)', spec)
    return m and re.sub(r'[-_.]+', '-', m.group(1)).lower()


pinned = {name(p) for p in pins}
lines = []


def read(path):
    with open(path) as f:
        for line in f:
            line = line.split(' #')[0].strip()
            if not line or line.startswith('#'):
                continue
            if line.startswith(('-r ', '--requirement ')):
                read(os.path.join(os.path.dirname(path),
                                  line.split(None, 1)[1]))
            elif name(line) not in pinned:
                lines.append(line)


for f in files:
    read(f)
with open(out, 'w') as f:
    f.write(''.join(line + '\n' for line in dict.fromkeys(lines)))
PY

deps_stamp="$venv/.nova-deps"
want_deps=$(
    printf 'series %s\n' "$series"
    printf 'python %s\n' "$("$venv/bin/python" -VV | head -1)"
    printf 'pin %s\n' "${pins[@]}" "${harness[@]}"
    cat "$reqs"
)
if [ "$(cat "$deps_stamp" 2>/dev/null)" != "$want_deps" ]; then
    echo "Installing Nova $series and the test requirements into $venv"
    rm -f "$deps_stamp" "$venv/.nova-project"
    # One resolver run, so the pins hold against the requirements; pbr,
    # setuptools and wheel build cyborg-nova without build isolation.
    venv_pip install "${pins[@]}" "${harness[@]}" pbr setuptools wheel -r "$reqs"
    echo "$want_deps" > "$deps_stamp"
fi

install_project "$venv/.nova-project"

"$venv/bin/python" - <<'PY'
import importlib.metadata as md
import importlib.util
import os

import nova.virt

shim = os.path.join(os.path.dirname(nova.virt.__file__), 'cyborg_nova.py')
assert os.path.isfile(shim), 'shim not installed: %s' % shim
assert importlib.util.find_spec('nova.virt.cyborg_nova').origin == shim
print('nova %s, openstack-placement %s, cyborg-nova %s: OK' % tuple(
    md.version(d) for d in ('nova', 'openstack-placement', 'cyborg-nova')))
PY
