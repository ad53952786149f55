#!/usr/bin/env bash
# Builds a release of cyborg-nova from this tree, into dist/ (or $1):
#   cyborg_nova-<version>-py3-none-any.whl   the wheel operators install
#   cyborg_nova-<version>.tar.gz             the sdist (with pbr's ChangeLog
#                                            and AUTHORS from git)
#   RELEASENOTES-<version>.rst               reno's report of every release
#                                            note, newest release first
# <version> is pbr's: "version" in setup.cfg, exactly, on a commit tagged
# with it; <version>.devN (N commits since) before the tag is made.
#
# Uses .venv (tools/setup-env.sh demo creates it) or $CYBORG_NOVA_VENV;
# needs the git history (a clone, not an export) for the version and the
# notes. Usage: tools/build-release.sh [output-dir]
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
venv=${CYBORG_NOVA_VENV:-$top/.venv}
out=$(mkdir -p "${1:-$top/dist}" && cd "${1:-$top/dist}" && pwd)
python="$venv/bin/python"
[ -x "$python" ] || {
    echo "no virtualenv at $venv: run tools/setup-env.sh demo first" >&2
    exit 1
}

cd "$top"
# pbr's build backend (pyproject.toml), called as a PEP 517 frontend
# would without isolation: the venv already has pbr and setuptools.
"$python" - "$out" <<'PY'
import os
import shutil
import sys
import tempfile

import pbr.build

out = sys.argv[1]
with tempfile.TemporaryDirectory() as tmp:
    names = [pbr.build.build_sdist(tmp), pbr.build.build_wheel(tmp)]
    for name in names:
        shutil.move(os.path.join(tmp, name), os.path.join(out, name))
        print(os.path.join(out, name))
PY
# What setuptools and pbr leave in the source tree on the way (the sdist
# carries pbr's RELEASENOTES.rst, reno's cache, ChangeLog and AUTHORS).
rm -rf build cyborg_nova.egg-info RELEASENOTES.rst \
    releasenotes/notes/reno.cache ChangeLog AUTHORS
wheel=$(ls -t "$out"/cyborg_nova-*.whl | head -1)
version=${wheel##*/cyborg_nova-}
version=${version%%-py3*}
"$venv/bin/reno" -q report --output "$out/RELEASENOTES-$version.rst" .
echo "$out/RELEASENOTES-$version.rst"
