#!/usr/bin/env bash
# A mini-cloud on this machine: real Keystone, Glance, Placement, Neutron
# (API only), Nova (API, conductor, scheduler, three nova-compute with
# compute_driver = cyborg_nova.FakeDriverWithoutFakeNodes on fake host
# trees), RabbitMQ,
# MariaDB, a cyborg-nova agent per compute and the conductor-lite, all on
# loopback; then the operator's openstack commands (and a kill -9 of a
# nova-compute it must recover from) and the project's tempest plugin
# tests against it; then everything it started is stopped.
#
#   tools/mini-cloud.sh             run, test, stop
#   tools/mini-cloud.sh --keep      run, test, leave the cloud up
#   tools/mini-cloud.sh --keep --no-tempest
#   tools/mini-cloud.sh --stop      stop a cloud left up with --keep
#   tools/mini-cloud.sh --nova-in-l1
#                                   instead of the operator commands and
#                                   tempest: a nova-compute with the libvirt
#                                   driver in a VM with an SR-IOV NIC, and
#                                   a server booted onto one of its VFs
#                                   (tools/mini_cloud_l1.py)
#
# Installs what it needs first (idempotent): Debian packages when root,
# a venv (.venv-cloud, or $MINI_CLOUD_VENV) with the services from PyPI
# and the project installed non-editable. See
# doc/source/contributor/mini-cloud.rst.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
venv=${MINI_CLOUD_VENV:-$top/.venv-cloud}
python=${PYTHON:-python3}

quiet_pip() {
    # pip's own chatter about unused index locations is noise here.
    "$venv/bin/pip" install -q "$@" 2>&1 | grep -v 'is ignored' || true
    return "${PIPESTATUS[0]}"
}

install_debian() {
    local missing=()
    command -v mariadbd > /dev/null || missing+=(mariadb-server)
    [[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]] || \
        missing+=(rabbitmq-server)
    if (( ${#missing[@]} )); then
        if [[ $(id -u) != 0 ]]; then
            echo "mini-cloud: needs ${missing[*]} (run as root to install)" >&2
            exit 1
        fi
        echo "mini-cloud: installing ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends "${missing[@]}" > /dev/null
    fi
}

install_venv() {
    local stamp=$venv/.mini-cloud-installed
    if [[ ! -x $venv/bin/python ]]; then
        "$python" -m venv "$venv"
    fi
    if [[ ! -f $stamp ]]; then
        echo "mini-cloud: installing the services into $venv"
        quiet_pip -U pip
        quiet_pip -r "$top/tools/mini-cloud-requirements.txt" \
            -r "$top/requirements.txt"
        touch "$stamp"
    fi
    # The project itself, always fresh and never editable: nova-compute
    # loads cyborg_nova.FakeDriverWithoutFakeNodes through the
    # nova/virt/cyborg_nova.py module only a real install places.
    quiet_pip --no-deps --force-reinstall "$top"
}

case "${1:-}" in
    --stop|-h|--help) ;;
    *)
        install_debian
        install_venv
        ;;
esac
if [[ " $* " == *" --nova-in-l1 "* ]]; then
    # nova-compute in the VM runs Nova's libvirt driver from this venv;
    # the VM's kernel and QEMU come from tools/nested/setup.sh.
    "$top/tools/install-libvirt-test-deps.sh" "$venv/bin/python"
    "$top/tools/nested/setup.sh"
fi
if [[ ! -x $venv/bin/python ]]; then
    echo "mini-cloud: no venv at $venv" >&2
    exit 1
fi
exec "$venv/bin/python" "$top/tools/mini_cloud.py" --venv "$venv" "$@"
