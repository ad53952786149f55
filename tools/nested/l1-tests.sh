# The real-kernel tests, inside L1 (run-l1.sh -d both l1-tests.sh).
#
# Brings SR-IOV up as a compute host has it (two VFs on the igb NIC and
# on the NVMe controller, bound to their L1 drivers), the management
# network (the host's loopback at 10.0.2.2) and libvirtd, then runs the
# in-L1 test modules (tests/realkernel/inside_*.py) with pytest against
# L1's own /sys, udev, privsep daemons, libvirtd and an L2 guest; the
# host's Placement is L1_PLACEMENT. pytest's JUnit report and log go to
# $RUN, for tests/functional/realkernel/test_real_kernel.py.
#
# L1_REPO: this tree (seen in L1 at the same path, read-only);
# L1_PYTHON: a venv's python with cyborg-nova's requirements and pytest;
# L1_PLACEMENT: the host's Placement as L1 reaches it;
# L1_PYTEST_ARGS: extra pytest arguments (e.g. -k).
for v in L1_REPO L1_PYTHON L1_PLACEMENT; do
    [ -n "${!v:-}" ] || { t "$v is not set"; exit 2; }
done
udev_start
sriov_up 2 || exit 1
mgmt_net_up || exit 1
libvirtd_start || exit 1
cp /run/nested-vfs "$RUN/vfs"
t "running the in-L1 tests"
cd "$L1_REPO" || exit 1
# The tree is read-only in L1 (its overlay takes the byte code).
PYTHONPATH=$L1_REPO "$L1_PYTHON" -m pytest -p no:cacheprovider -q -rs \
    -W ignore --junitxml="$RUN/junit.xml" ${L1_PYTEST_ARGS:-} \
    tests/realkernel/inside_discovery.py \
    tests/realkernel/inside_privsep.py \
    tests/realkernel/inside_udev.py \
    tests/realkernel/inside_guest.py \
    tests/realkernel/inside_aer.py 2>&1 | tee "$RUN/pytest.log"
rc=${PIPESTATUS[0]}
t "in-L1 tests: pytest exit code $rc"
exit "$rc"
