#!/usr/bin/env bash
# The whole test suite, from a fresh Debian machine with python3:
# installs what it needs (tools/setup-env.sh, tools/setup-bench-venvs.sh),
# then runs
#   1. the project's own tests (unit, functional, udev under umockdev),
#   2. the tests inside Nova's functional harness on Nova 34 (own process:
#      Nova's harness patches eventlet),
#   3. the same on Nova 31 (2025.1), in a venv of its own,
# and ends with one line adding them up. Extra arguments go to every
# pytest run (e.g. -x, -k NAME).
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/tools/setup-env.sh" test || exit 1
# The benchmark smoke test runs benchmarks/run_all.py --smoke: PostgreSQL,
# Placement under gunicorn and upstream Cyborg, each in a venv of its own.
"$top/tools/setup-bench-venvs.sh" || exit 1
venv=${CYBORG_NOVA_VENV:-$top/.venv}
cd "$top"
reports=$(mktemp -d)
status=0

suite() {
    local name=$1 python=$2
    shift 2
    echo
    echo "== $name"
    "$python" -m pytest -q -rs -p no:cacheprovider -p no:warnings \
        --junitxml="$reports/$name.xml" "$@" || status=1
}

suite project "$venv/bin/python" tests --ignore=tests/functional/nova "$@"
suite nova34 "$venv/bin/python" -W ignore tests/functional/nova "$@"
if "$top/tools/setup-nova-venv.sh" "$top/.venv-nova31" 31; then
    suite nova31 "$top/.venv-nova31/bin/python" -W ignore \
        tests/functional/nova "$@"
else
    echo "could not set up the Nova 31 venv"
    status=1
fi

echo
# As root the set-up installs what every test needs: a whole run with a
# skip is a missing install step, and fails (CYBORG_NOVA_ALLOW_SKIPS=1
# to allow it). A run narrowed by arguments may skip.
strict=()
if [ "$(id -u)" = 0 ] && [ $# -eq 0 ] && \
        [ -z "${CYBORG_NOVA_ALLOW_SKIPS:-}" ]; then
    strict=(--no-skips)
fi
"$venv/bin/python" tools/junit_summary.py "${strict[@]}" \
    "$reports"/*.xml || status=1
rm -rf "$reports"
exit $status
