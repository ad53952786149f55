#!/usr/bin/env bash
# Prints one hash of what an installation of this tree contains: the
# packages' files, the packaging files and the commit (pbr's version comes
# from it). tools/setup-env.sh and tools/setup-nova-venv.sh reinstall
# cyborg-nova only when it changes.
set -euo pipefail
cd "$(dirname "$0")/.."
{
    git rev-parse HEAD 2>/dev/null || echo no-git
    find cyborg_nova cyborg_drivers cyborg_nova_tempest_plugin privsep nova \
        setup.cfg setup.py pyproject.toml requirements.txt \
        -name __pycache__ -prune -o -type f ! -name '*.py[co]' -print0 \
        | LC_ALL=C sort -z | xargs -0 sha256sum
} | sha256sum | cut -d' ' -f1
