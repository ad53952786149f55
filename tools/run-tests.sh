#!/usr/bin/env bash
# The whole test suite, from a fresh Debian machine with python3:
# installs what it needs (tools/setup-env.sh, tools/setup-bench-venvs.sh),
# then runs these suites, each in its own pytest process:
#   - the VMs and clouds (the mini-cloud, Nova in L1, the real kernel,
#     the benchmarks' smoke run),
#   - the project's other tests (unit, functional, udev under umockdev),
#   - the tests inside Nova's functional harness on every supported Nova
#     release (NOVA_SERIES below; Nova's harness may patch eventlet): the
#     newest in .venv, the others each in a venv of its own
#     (.venv-novaNN, tools/setup-nova-venv.sh).
# Two workers (each keeps about one core busy) take the suites, longest
# first, as soon as they are free; each suite's output is printed whole
# at the end, with its time, and one line adds the whole run up.
# Extra arguments go to every pytest run (e.g. -x, -k NAME).
#
# The run as a whole has RUN_BUDGET seconds (default 80 minutes, inside
# CI's 90): a suite still running then is stopped and reported as failed,
# so a hang ends in a report rather than in CI's timeout.
set -uo pipefail
# The supported Nova releases, newest first; the newest is the one
# requirements pin into .venv. tests/functional/test_nova_matrix.py holds
# this list, tox.ini's novaNN envs, tools/setup-nova-venv.sh, setup.cfg's
# nova extra and the docs to one another.
NOVA_SERIES=(34 33 32 31)
# Output reaches a pipe unbuffered: a CI log shows how far a run got.
export PYTHONUNBUFFERED=1
started=$SECONDS
budget=${RUN_BUDGET:-4800}
took() { printf '(%s took %dm%02ds)\n' "$1" $(( ($SECONDS - $2) / 60 )) \
    $(( ($SECONDS - $2) % 60 )); }
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/tools/setup-env.sh" test || exit 1
# The benchmark smoke test runs benchmarks/run_all.py --smoke: PostgreSQL,
# Placement under gunicorn and upstream Cyborg, each in a venv of its own.
"$top/tools/setup-bench-venvs.sh" || exit 1
# The real-kernel tests boot a VM: QEMU, a Debian kernel and QEMU 10 from
# backports, unpacked under .nested (tools/nested/setup.sh).
"$top/tools/nested/setup.sh" || exit 1
took set-up $started
venv=${CYBORG_NOVA_VENV:-$top/.venv}
cd "$top"
reports=$(mktemp -d)
status=0

# What is left of the run's budget, in seconds (at least 1).
left() {
    local n=$(( budget - (SECONDS - started) ))
    echo $(( n > 0 ? n : 1 ))
}

suite() {
    local name=$1 python=$2
    shift 2
    echo
    echo "== $name"
    local t0=$SECONDS rc=0
    # A test that hangs fails after TEST_TIMEOUT seconds with every
    # thread's stack, and the run goes on; the suite as a whole stops
    # when the run's budget is spent.
    # pytest's files go under the run's directory (a short path: tests
    # put sockets there), removed at the end but for a failed suite's.
    mkdir -p "$reports/t"
    timeout --kill-after=30 "$(left)" \
        "$python" -m pytest -q -rs -p no:cacheprovider -p no:warnings \
        --timeout="${TEST_TIMEOUT:-900}" --basetemp="$reports/t/$name" \
        --junitxml="$reports/$name.xml" "$@" || rc=$?
    if [ $rc = 124 ] || [ $rc = 137 ]; then
        echo "$name: stopped, the run's budget of ${budget} s is spent"
    fi
    took "$name" $t0
    return $rc
}

# Prints the suites' logs, in order, once all are done; fails the run
# if one failed.
finish() {
    local name
    wait
    for name; do
        cat "$reports/$name.log"
        [ "$(cat "$reports/$name.rc" 2>/dev/null)" = 0 ] || status=1
    done
}

# The tests that run VMs and whole clouds (the mini-cloud, the real
# kernel, Nova in L1, the benchmarks' smoke run) mostly wait on other
# processes, their VMs included: a suite of their own.
vms=(tests/functional/test_mini_cloud.py tests/functional/test_nova_in_l1.py
     tests/functional/realkernel tests/functional/test_benchmarks_smoke.py)

# Inside Nova's harness, Nova's own database layer now and then fails a
# write with "Can't upgrade a READER transaction to a WRITER
# mid-transaction" (oslo.db; in Nova's frames only: the resource tracker's
# compute_node.save(), a service's destroy() at teardown), on every Nova
# release tested, about one test in seventy a run; it once hit the same
# test twice in a row (Nova 31, a test whose compute's init_host runs
# twice). A test whose failure shows that error, and only such a test,
# runs up to twice more; pytest's summary counts the reruns. Any other
# failure fails at once.
harness=(-W ignore --reruns 2
         --only-rerun "Can't upgrade a READER transaction to a WRITER")
newest=${NOVA_SERIES[0]}

# One Nova release: its venv (the newest is .venv), then its suite.
nova_suite() {
    local series=$1 t0=$SECONDS
    shift
    if [ "$series" != "$newest" ]; then
        if ! "$top/tools/setup-nova-venv.sh" "$top/.venv-nova$series" \
                "$series"; then
            echo "could not set up the Nova $series venv"
            return 1
        fi
        took "nova$series set-up" $t0
        # The random lifecycle tests do 200 (QAT) and 100 (vGPU and
        # bitstream) operations on the newest Nova, 40 each on an older
        # one; the vGPU moves with the GPU's driver out of process run
        # on the newest only, and of the scrub tests (the project's own
        # steps after Nova's release hooks) only the delete. That keeps
        # the run within CI's time.
        CYBORG_NOVA_LIFECYCLE_OPS=${CYBORG_NOVA_LIFECYCLE_OPS:-40} \
            suite "nova$series" "$top/.venv-nova$series/bin/python" \
            "${harness[@]}" \
            -k "not TestRemote and not (TestScrub and not deleted_units)" \
            tests/functional/nova "$@"
        return
    fi
    suite "nova$series" "$venv/bin/python" "${harness[@]}" \
        tests/functional/nova "$@"
}

# One suite of the run, by name.
job() {
    local name=$1
    shift
    case $name in
        vms) suite vms "$venv/bin/python" "${vms[@]}" "$@" ;;
        project) suite project "$venv/bin/python" tests \
                     --ignore=tests/functional/nova "${vms[@]/#/--ignore=}" \
                     "$@" ;;
        nova*) nova_suite "${name#nova}" "$@" ;;
    esac
}

# Every suite, longest first: two workers (each keeps about one core
# busy) take the next one as soon as they are free, so neither waits for
# the other's long suite. Each suite's output is printed whole once the
# run is done, in this order.
jobs=(vms project nova$newest)
for (( i = ${#NOVA_SERIES[@]} - 1; i > 0; i-- )); do
    jobs+=("nova${NOVA_SERIES[$i]}")
done
printf '%s\n' "${jobs[@]}" > "$reports/queue"

# The next suite of the queue, or nothing (exit 1) when it is empty.
next_job() {
    (
        flock 9
        local first
        first=$(head -n 1 "$reports/queue")
        [ -n "$first" ] || exit 1
        tail -n +2 "$reports/queue" > "$reports/queue.new"
        mv "$reports/queue.new" "$reports/queue"
        echo "$first"
    ) 9> "$reports/queue.lock"
}

worker() {
    local name
    while name=$(next_job); do
        echo "   $name started ($(date -u +%H:%M:%S))"
        job "$name" "$@" > "$reports/$name.log" 2>&1
        echo $? > "$reports/$name.rc"
        echo "   $name finished ($(date -u +%H:%M:%S))"
    done
}

echo
echo "== every suite, two at a time: ${jobs[*]}"
t0=$SECONDS
worker "$@" &
worker "$@" &
finish "${jobs[@]}"
echo
took "the suites" $t0

echo
# As root the set-up installs what every test needs: a whole run with a
# skip is a missing install step, and fails (CYBORG_NOVA_ALLOW_SKIPS=1
# to allow it). A run narrowed by arguments may skip.
strict=()
if [ "$(id -u)" = 0 ] && [ $# -eq 0 ] && \
        [ -z "${CYBORG_NOVA_ALLOW_SKIPS:-}" ]; then
    strict=(--no-skips)
fi
# Every suite's report, by name: a suite that was stopped left none,
# which the summary counts as a failure.
xmls=()
for name in "${jobs[@]}"; do xmls+=("$reports/$name.xml"); done
"$venv/bin/python" tools/junit_summary.py "${strict[@]}" "${xmls[@]}" \
    || status=1
# pytest's temporary files: kept for a suite that failed, to look at.
kept=()
for name in "${jobs[@]}"; do
    if [ "$(cat "$reports/$name.rc" 2>/dev/null)" = 0 ]; then
        rm -rf "$reports/t/$name"
    elif [ -d "$reports/t/$name" ]; then
        kept+=("$reports/t/$name")
    fi
done
if [ ${#kept[@]} -gt 0 ]; then
    echo "pytest's files of the failed suites are kept: ${kept[*]}"
else
    rm -rf "$reports"
fi
took "the whole run" 0
exit $status
