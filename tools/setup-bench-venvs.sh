#!/usr/bin/env bash
# What benchmarks/run_all.py needs beyond the project's own venv (.venv):
#
# - Debian packages: pciutils (lspci, the discovery baseline) and
#   PostgreSQL 15 (the multi-worker Placement database of
#   benchmarks/scale.py and benchmarks/churn.py). Installed with apt-get
#   when missing (needs root); nothing is started here: the benchmarks
#   start their own throw-away PostgreSQL instance (initdb + pg_ctl as
#   the postgres user, on loopback; tests/dbservers.py, as the tests do)
#   and stop it by PID.
# - .venv-placement: openstack-placement 16 served by gunicorn, with the
#   PostgreSQL (psycopg2-binary) and MariaDB (PyMySQL) drivers.
# - .venv-cyborg: upstream OpenStack Cyborg from PyPI, whose drivers'
#   discover() benchmarks/upstream_cyborg.py runs on the same fake trees.
#
# - matplotlib in the venv that runs benchmarks/run_all.py (the project's
#   .venv, or BENCH_VENV), for the plots; umockdev for the fence latency
#   step comes from tools/install-udev-test-deps.sh.
#
# Usage: tools/setup-bench-venvs.sh [--no-apt]
#   PYTHON=/path/to/python3 picks the interpreter for new venvs.
# Idempotent: a venv is (re)filled only when its stamp file (interpreter
# and pins) differs.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
apt=1
[ "${1:-}" = "--no-apt" ] && apt=0

need=()
command -v lspci >/dev/null || need+=(pciutils)
[ -x /usr/lib/postgresql/15/bin/initdb ] || need+=(postgresql)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$apt" = 1 ] && [ "$(id -u)" = 0 ]; then
        echo "Installing Debian packages: ${need[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends "${need[@]}" >/dev/null
    else
        echo "missing Debian packages (install as root): ${need[*]}" >&2
    fi
fi

fill() {
    local venv=$1; shift
    local stamp="$venv/.bench-deps"
    local want
    if [ ! -x "$venv/bin/python" ]; then
        echo "Creating virtualenv $venv ($("$python" --version 2>&1))"
        "$python" -m venv "$venv"
    fi
    want=$(printf 'python %s\n' "$("$venv/bin/python" -VV | head -1)";
           printf 'pin %s\n' "$@")
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
        echo "Installing into $venv: $*"
        rm -f "$stamp"
        "$venv/bin/python" -m pip -q --disable-pip-version-check \
            install "$@" 2> >(grep -v "^WARNING: Location '" >&2)
        echo "$want" > "$stamp"
    fi
}

fill "$top/.venv-placement" 'openstack-placement==16.0.0' 'SQLAlchemy<2.1' \
    gunicorn psycopg2-binary PyMySQL
fill "$top/.venv-cyborg" 'openstack-cyborg==17.0.0'

bench_venv=${BENCH_VENV:-$top/.venv}
if [ -x "$bench_venv/bin/python" ] && \
        ! "$bench_venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
    echo "Installing matplotlib into $bench_venv (the plots)"
    "$bench_venv/bin/python" -m pip -q --disable-pip-version-check \
        install matplotlib 2> >(grep -v "^WARNING: Location '" >&2)
fi
# The private PostgreSQL (tests/dbservers.py) is driven with psycopg2.
if [ -x "$bench_venv/bin/python" ] && \
        ! "$bench_venv/bin/python" -c 'import psycopg2' 2>/dev/null; then
    echo "Installing psycopg2-binary into $bench_venv"
    "$bench_venv/bin/python" -m pip -q --disable-pip-version-check \
        install psycopg2-binary 2> >(grep -v "^WARNING: Location '" >&2)
fi

"$top/.venv-placement/bin/python" - <<'PY'
import importlib.metadata as md
print('.venv-placement: openstack-placement %s, gunicorn %s, '
      'psycopg2-binary %s, SQLAlchemy %s: OK' % tuple(
          md.version(d) for d in ('openstack-placement', 'gunicorn',
                                  'psycopg2-binary', 'SQLAlchemy')))
PY
"$top/.venv-cyborg/bin/python" - <<'PY'
import importlib.metadata as md
print('.venv-cyborg: openstack-cyborg %s: OK' % md.version('openstack-cyborg'))
PY
