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

# pip, without warnings about configured index locations that do not exist.
pipq() {
    "$venv/bin/pip" -q --disable-pip-version-check "$@" \
        2> >(grep -v "^WARNING: Location '" >&2)
}

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
    pipq install pbr setuptools wheel "${args[@]}"
    echo "$want" > "$stamp"
fi
# A real (not editable) install, so that Nova finds the
# nova.virt.cyborg_nova module (an editable install does not place it),
# redone whenever the tree (or its commit, pbr's version) changed, so the
# installed commands run this tree's code.
project_stamp="$venv/.cyborg-nova-project"
want_project=$("$top/tools/project-hash.sh")
if [ "$(cat "$project_stamp" 2>/dev/null)" != "$want_project" ]; then
    echo "Installing cyborg-nova from $top into $venv"
    rm -f "$project_stamp"
    pipq install --no-deps --no-build-isolation --force-reinstall "$top"
    echo "$want_project" > "$project_stamp"
fi
if [ "$purpose" = test ]; then
    bash "$top/tools/install-udev-test-deps.sh" "$venv/bin/python"
    bash "$top/tools/install-libvirt-test-deps.sh" "$venv/bin/python"
fi
