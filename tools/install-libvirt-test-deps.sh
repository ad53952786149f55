#!/usr/bin/env bash
# Install what tests/functional/libvirt needs: a libvirt daemon with QEMU
# (started by the tests themselves, no systemd) and libvirt-python in the
# given virtualenv.
#
# Usage: tools/install-libvirt-test-deps.sh /path/to/venv/bin/python
#
# Idempotent: Debian packages are installed only when missing (and only as
# root), libvirt-python only when "import libvirt" fails in that venv.
#
# Verified on Debian bookworm (libvirt 9.0): libvirt-python has no wheels;
# pip builds it against the installed libvirt (libvirt-dev, pkg-config and
# a C compiler), and a newer binding then exposes only libvirt 9.0's API.
set -euo pipefail

PYTHON=${1:?usage: $0 /path/to/venv/bin/python}

# Needed at test run time: the daemons, QEMU (TCG is enough) and virsh.
RUNTIME_PACKAGES=(libvirt-daemon-system qemu-system-x86 libvirt-clients)
# Needed only to build libvirt-python into the venv.
BUILD_PACKAGES=(libvirt-dev pkg-config gcc)

have_libvirt_python() {
    "$PYTHON" -c 'import libvirt' >/dev/null 2>&1
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
if ! have_libvirt_python; then
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
        # Not fatal: the libvirt tests then skip, saying what is missing.
        echo "Not root; not installing missing Debian packages:" \
            "${missing[*]}" >&2
        exit 0
    fi
    apt-get update
    # Without systemd the packages' maintainer scripts cannot start the
    # daemons (policy-rc.d-less containers just print a warning); the
    # tests start libvirtd and virtlogd themselves.
    DEBIAN_FRONTEND=noninteractive apt-get install -y \
        --no-install-recommends "${missing[@]}"
fi

if ! have_libvirt_python; then
    "$PYTHON" -m pip install libvirt-python
fi

"$PYTHON" -c "import libvirt
v = libvirt.getVersion()
print('libvirt-python against libvirt %d.%d.%d: OK'
      % (v // 1000000, v // 1000 % 1000, v % 1000))"
