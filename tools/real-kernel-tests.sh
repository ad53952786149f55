#!/usr/bin/env bash
# The real-kernel tests alone (they are also part of tools/run-tests.sh):
# boots L1, a QEMU VM with Debian's stock kernel, an igb SR-IOV NIC and
# an NVMe controller with SR-IOV behind an emulated IOMMU, and runs the
# project inside it against L1's own /sys, udev, privsep daemons,
# libvirtd and an L2 guest (doc/source/contributor/real-kernel.rst).
#
# Installs what it needs first (tools/setup-env.sh test, then
# tools/nested/setup.sh: QEMU, the kernel and QEMU 10 from backports,
# unpacked under .nested, never installed). Extra arguments go to pytest.
# Environment: NESTED_WORK (default .nested), NESTED_ACCEL=auto|tcg|kvm.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/tools/setup-env.sh" test
"$top/tools/nested/setup.sh"
cd "$top"
exec "${CYBORG_NOVA_VENV:-$top/.venv}/bin/python" -m pytest -q -rs \
    -p no:cacheprovider tests/functional/realkernel "$@"
