# Sourced by tools/setup-env.sh and tools/setup-nova-venv.sh, after they
# set $venv (the virtualenv) and $top (this tree).

# pip of $venv, quiet, without warnings about configured index locations
# that do not exist.
venv_pip() {
    "$venv/bin/python" -m pip -q --disable-pip-version-check "$@" \
        2> >(grep -v "^WARNING: Location '" >&2)
}

# Installs this tree into $venv, NOT editable (so that Nova finds the shim
# module nova/virt/cyborg_nova.py in the venv's nova/virt: an editable
# install does not place it there), whenever the tree or its commit
# (pbr's version) changed since the install that stamp file $1 records,
# so the installed commands run this tree's code. Nothing is reinstalled
# for an unchanged tree.
install_project() {
    local stamp=$1 want
    want=$("$top/tools/project-hash.sh")
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
        echo "Installing cyborg-nova (non-editable) from $top into $venv"
        rm -f "$stamp"
        venv_pip install --no-deps --no-build-isolation --force-reinstall \
            "$top"
        echo "$want" > "$stamp"
    fi
}
