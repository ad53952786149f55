#!/usr/bin/env bash
# Install what tests/functional/udev needs: umockdev (the preload library,
# its typelib and umockdev-wrapper) and PyGObject in the given virtualenv.
#
# Usage: tools/install-udev-test-deps.sh /path/to/venv/bin/python
#
# Idempotent: Debian packages are installed only when missing (and only as
# root), PyGObject only when "import gi" fails in that venv.
#
# Verified on Debian bookworm (glib 2.74) with a pyenv Python 3.11 venv:
# PyGObject >= 3.51 needs girepository-2.0 (glib >= 2.80), which bookworm
# lacks, hence the pin.  PyGObject has no Linux wheels: pip builds it, and
# its build requirement pycairo, from source, which needs the cairo and
# gobject-introspection headers, pkg-config and a C compiler.
set -euo pipefail

PYTHON=${1:?usage: $0 /path/to/venv/bin/python}

# Needed at test run time.
RUNTIME_PACKAGES=(umockdev gir1.2-umockdev-1.0 libumockdev0)
# Needed only to build PyGObject (and pycairo) into the venv.
BUILD_PACKAGES=(libgirepository1.0-dev libcairo2-dev pkg-config gcc)

have_gi() {
    "$PYTHON" -c 'import gi' >/dev/null 2>&1
}

have_python_headers() {
    "$PYTHON" -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(
    os.path.join(sysconfig.get_paths()["include"], "Python.h")))'
}

is_installed() {
    [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = \
        installed ]
}

wanted=("${RUNTIME_PACKAGES[@]}")
if ! have_gi; then
    wanted+=("${BUILD_PACKAGES[@]}")
    # A venv on Debian's own interpreter needs its headers package; pyenv
    # and similar builds ship the headers themselves.
    have_python_headers || wanted+=(python3-dev)
fi

missing=()
if command -v dpkg-query >/dev/null 2>&1; then
    for pkg in "${wanted[@]}"; do
        is_installed "$pkg" || missing+=("$pkg")
    done
else
    echo "dpkg-query not found: not Debian, not installing packages" >&2
fi

if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        # Not fatal: the udev tests then skip, saying what is missing.
        echo "Not root; not installing missing Debian packages:" \
            "${missing[*]}" >&2
        exit 0
    fi
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y \
        --no-install-recommends "${missing[@]}"
fi

if ! have_gi; then
    "$PYTHON" -m pip install 'PyGObject<3.51'
fi

"$PYTHON" -c "import gi
gi.require_version('UMockdev', '1.0')
from gi.repository import UMockdev
print('PyGObject %s with the UMockdev typelib: OK' % gi.__version__)"
