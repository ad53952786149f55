# The scrub-hold benchmark, inside L1 (benchmarks/scrub_hold.py boots
# L1 with it: run-l1.sh -d both l1-scrub-bench.sh).
#
# Brings SR-IOV up as a compute host has it (two VFs on the igb NIC and
# on the NVMe controller, each NVMe VF with a private namespace), then
# runs the benchmark's in-L1 part, which writes $RUN/scrub-hold.json.
#
# L1_REPO: this tree (read-only in L1); L1_PYTHON: a venv's python with
# cyborg-nova's requirements; L1_ROUNDS: rounds per family and steps.
for v in L1_REPO L1_PYTHON; do
    [ -n "${!v:-}" ] || { t "$v is not set"; exit 2; }
done
udev_start
sriov_up 2 || exit 1
t "scrub-hold benchmark, ${L1_ROUNDS:-5} rounds each"
cd "$L1_REPO" || exit 1
PYTHONPATH=$L1_REPO "$L1_PYTHON" -W ignore benchmarks/scrub_hold.py \
    --inside --rounds "${L1_ROUNDS:-5}" --output "$RUN/scrub-hold.json"
rc=$?
t "scrub-hold benchmark: exit code $rc"
exit "$rc"
