#!/usr/bin/env bash
# The demo: what cyborg-nova sees on a sample accelerator host and on
# this machine. Installs what it needs first (see tools/setup-env.sh).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/tools/setup-env.sh" demo >&2
venv=${CYBORG_NOVA_VENV:-$top/.venv}
exec "$venv/bin/python" "$top/tools/demo.py" "$@"
