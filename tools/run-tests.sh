#!/usr/bin/env bash
# The whole test suite, from a fresh Debian machine with python3:
# installs what it needs (see tools/setup-env.sh), then runs every test
# suite and ends with pytest's summary line.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/tools/setup-env.sh" test
venv=${CYBORG_NOVA_VENV:-$top/.venv}
cd "$top"
exec "$venv/bin/python" -m pytest -q -rs tests "$@"
