#!/usr/bin/env bash
# Prepares what the demo and the tests need, idempotently:
#   - Debian packages (only when root; otherwise says what is missing),
#   - a virtualenv in .venv (or $CYBORG_NOVA_VENV) with the requirements,
#   - cyborg-nova itself installed from this tree.
# Usage: tools/setup-env.sh demo|test
set -euo pipefail

purpose=${1:?usage: $0 demo|test}
top=$(cd "$(dirname "$0")/.." && pwd)
venv=${CYBORG_NOVA_VENV:-$top/.venv}

debs=(python3-venv python3-dev pciutils git)
if [ "$purpose" = test ]; then
    debs+=(umockdev gir1.2-umockdev-1.0 libumockdev0 libvirt-clients
           libxml2-utils rabbitmq-server
           # The conductor's database tests: private MariaDB and
           # PostgreSQL servers, and haproxy before two conductors.
           mariadb-server postgresql haproxy)
fi

missing=()
for pkg in "${debs[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' \
        || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        echo "Installing Debian packages: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
        echo "Not root: cannot install ${missing[*]}; continuing without." >&2
    fi
fi

# shellcheck source=tools/venv-lib.sh
. "$top/tools/venv-lib.sh"

if [ ! -x "$venv/bin/python" ]; then
    echo "Creating virtualenv $venv"
    python3 -m venv "$venv"
fi

reqs=(requirements.txt demo-requirements.txt)
[ "$purpose" = test ] && reqs+=(test-requirements.txt)
stamp="$venv/.cyborg-nova-$purpose"
want=$(cd "$top" && cat "${reqs[@]}" setup.cfg | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "Installing Python requirements ($purpose) into $venv"
    args=()
    for r in "${reqs[@]}"; do args+=(-r "$top/$r"); done
    venv_pip install pbr setuptools wheel "${args[@]}"
    echo "$want" > "$stamp"
fi
install_project "$venv/.cyborg-nova-project"
if [ "$purpose" = test ]; then
    bash "$top/tools/install-udev-test-deps.sh" "$venv/bin/python"
    bash "$top/tools/install-libvirt-test-deps.sh" "$venv/bin/python"
fi
