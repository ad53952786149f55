#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

"""How long the ``cyborg-nova`` command takes to start, with its peer.

Wall time of a fresh process for each command, as an operator runs it
(the console scripts of this venv, with this tree first on PYTHONPATH),
interleaved in the same loop so machine noise hits all of them alike:

- ``cyborg-nova --version``, ``cyborg-nova --help`` and ``cyborg-nova
  discover --sysfs-root <tree>`` (the ``mixed-host`` fake host);
- the peer: the openstack CLI's ``openstack --version``, same venv;
- ``python -c pass``: the interpreter's own start, the floor;
- for reference, ``python -c 'import nova.virt.libvirt.config'``: the
  Nova import nova-compute's side of cyborg-nova makes
  (:mod:`cyborg_nova.virt.guest`) and the CLI must not.

Then each once more under ``python -X importtime``, and ``import
cyborg_nova.cmd.cli`` alone: how many modules each imports beyond the
interpreter's start, the sum of the cumulative import time of those
imported at top level, and how many of them are Nova's (``nova`` or
``nova.*``).

Prints a Markdown table and writes it to
``benchmarks/results/cli-start.md`` (and the raw numbers to
``cli-start.json`` beside it).

Usage: python benchmarks/cli_start.py [--runs 20] [--warmup 1]
"""

from __future__ import annotations

import argparse
from importlib import metadata
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
BIN = os.path.dirname(sys.executable)
CYBORG_NOVA = os.path.join(BIN, 'cyborg-nova')
OPENSTACK = os.path.join(BIN, 'openstack')
PROFILE = 'mixed-host'

FLOOR = 'python -c pass'
VERSION = 'cyborg-nova --version'
HELP = 'cyborg-nova --help'
DISCOVER = 'cyborg-nova discover --sysfs-root <tree>'
NOVA_IMPORT = 'python -c "import nova.virt.libvirt.config"'
PEER = 'openstack --version'
IMPORT_CLI = 'import cyborg_nova.cmd.cli'
#: The commands the CLI must start without Nova.
NOVA_FREE = (VERSION, HELP, DISCOVER)


def _env() -> dict:
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join(
        p for p in (REPO_ROOT, env.get('PYTHONPATH')) if p)
    return env


def commands(tree: str) -> dict[str, list[str]]:
    """{row name: argv}, in the order they are run and shown."""
    found = {
        FLOOR: [sys.executable, '-c', 'pass'],
        VERSION: [CYBORG_NOVA, '--version'],
        HELP: [CYBORG_NOVA, '--help'],
        DISCOVER: [CYBORG_NOVA, 'discover', '--sysfs-root', tree],
    }
    if os.path.exists(OPENSTACK):
        found[PEER] = [OPENSTACK, '--version']
    if _version('nova'):
        found[NOVA_IMPORT] = [sys.executable, '-c',
                              'import nova.virt.libvirt.config']
    return found


def build_tree(workdir: str) -> str:
    tree = os.path.join(workdir, 'sys')
    subprocess.run([sys.executable, '-m', 'cyborg_drivers.fake.hosttree',
                    PROFILE, tree], env=_env(), check=True,
                   stdout=subprocess.DEVNULL)
    return tree


def check(argv: list[str]) -> None:
    """Run once; the command must succeed (else its time means nothing)."""
    proc = subprocess.run(argv, env=_env(), capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit('%s failed (%d):\n%s' % (
            ' '.join(argv), proc.returncode, proc.stderr[-2000:]))


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=_env(), stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - start) * 1000.0


def importtime(argv: list[str]) -> list[tuple[int, int, str]]:
    """(depth, cumulative us, module) of each import ``argv`` makes.

    ``argv`` is a Python script or ``-c`` and its arguments, run by this
    interpreter with ``-X importtime``.
    """
    proc = subprocess.run([sys.executable, '-X', 'importtime'] + argv,
                          env=_env(), capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit('%s failed (%d):\n%s' % (
            ' '.join(argv), proc.returncode, proc.stderr[-2000:]))
    found = []
    for line in proc.stderr.splitlines():
        if not line.startswith('import time:') or '[us]' in line:
            continue
        _, cumulative, name = line[len('import time:'):].split('|')
        depth = (len(name) - len(name.lstrip(' '))) // 2
        found.append((depth, int(cumulative), name.strip()))
    return found


def is_nova(module: str) -> bool:
    return module == 'nova' or module.startswith('nova.')


def imports(tree: str) -> dict[str, dict]:
    """What each command imports beyond the interpreter's own start."""
    start = {name for _, _, name in importtime(['-c', 'pass'])}
    scripts = {IMPORT_CLI: ['-c', 'import cyborg_nova.cmd.cli']}
    for name, argv in commands(tree).items():
        if name != FLOOR:
            # Run by ``python -X importtime``: the script or ``-c``.
            scripts[name] = argv[1:] if argv[0] == sys.executable else argv
    result = {}
    for name, argv in scripts.items():
        found = [(d, us, m) for d, us, m in importtime(argv)
                 if m not in start]
        nova = sorted(m for _, _, m in found if is_nova(m))
        result[name] = {
            'modules': len(found),
            'top_level_ms': sum(us for d, us, _ in found if d == 0) / 1000.0,
            'nova_modules': len(nova),
            'nova_first': nova[:5],
        }
    return result


def measure(runs: int, warmup: int, workdir: str) -> dict:
    tree = build_tree(workdir)
    cmds = commands(tree)
    for argv in cmds.values():
        check(argv)
    samples = {name: [] for name in cmds}
    for _ in range(warmup):  # the page cache, .pyc files
        for argv in cmds.values():
            timed(argv)
    for _ in range(runs):
        for name, argv in cmds.items():
            samples[name].append(timed(argv))
    return {'samples': samples, 'imports': imports(tree)}


def machine() -> str:
    return '%d cores, Python %s' % (os.cpu_count() or 0,
                                    platform.python_version())


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _versions() -> str:
    return ', '.join('%s %s' % (dist, _version(dist) or 'not installed')
                     for dist in ('cliff', 'nova', 'python-openstackclient'))


def report(result: dict, runs: int, warmup: int) -> str:
    samples = result['samples']
    peer = statistics.median(samples[PEER]) if PEER in samples else None
    lines = [
        '# Start time of the cyborg-nova command',
        '',
        'Generated by `benchmarks/cli_start.py`: %d interleaved runs of '
        'each command, after %d warm-up round(s). Machine: %s; %s. Each '
        'run is a fresh process of this venv (its console scripts, its '
        'python), this tree first on PYTHONPATH, output discarded; '
        '`<tree>` is the `%s` fake host (a sysfs tree).'
        % (runs, warmup, machine(), _versions(), PROFILE),
        '',
        '| command | median ms | min ms | max ms | vs `%s` |' % PEER,
        '|---|---:|---:|---:|---:|',
    ]
    for name, values in samples.items():
        lines.append('| `%s` | %.0f | %.0f | %.0f | %s |' % (
            name, statistics.median(values), min(values), max(values),
            '%.2fx' % (statistics.median(values) / peer) if peer
            else 'n/a'))
    if PEER not in samples:
        lines += ['', 'The peer was not run: no `openstack` in %s.' % BIN]
    if NOVA_IMPORT not in samples:
        lines += ['', 'Nova is not installed here: its import was not run.']
    lines += [
        '',
        '## Imports',
        '',
        'Each command once more under `python -X importtime`, which slows '
        'it: modules imported beyond those of `python -c pass`, the sum of '
        'the cumulative time of those imported at top level, and how many '
        'of them are Nova\'s (`nova` or `nova.*`).',
        '',
        '| what | modules | top-level imports ms | nova modules |',
        '|---|---:|---:|---:|',
    ]
    for name, entry in result['imports'].items():
        lines.append('| `%s` | %d | %.0f | %d |' % (
            name, entry['modules'], entry['top_level_ms'],
            entry['nova_modules']))
    lines += [
        '',
        'cliff imports every command module of the `cyborg_nova.cli` entry '
        'points when the application starts, for `--version` too: one '
        'command module importing Nova at load makes every command pay '
        'the Nova import of the last row.',
        '',
    ]
    return '\n'.join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--runs', type=int, default=20)
    parser.add_argument('--warmup', type=int, default=1,
                        help='rounds run first and not counted '
                             '(default: %(default)s)')
    parser.add_argument('--output', default=os.path.join(
        HERE, 'results', 'cli-start.md'))
    args = parser.parse_args(argv)
    if not os.path.exists(CYBORG_NOVA):
        raise SystemExit('no %s: pip install this tree into the venv'
                         % CYBORG_NOVA)
    workdir = tempfile.mkdtemp(prefix='cyborg-nova-cli-')
    try:
        result = measure(args.runs, args.warmup, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    text = report(result, args.runs, args.warmup)
    print(text)
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, 'w') as f:
        f.write(text)
    with open(os.path.splitext(args.output)[0] + '.json', 'w') as f:
        json.dump({'runs': args.runs, 'warmup': args.warmup,
                   'machine': machine(), 'versions': _versions(),
                   'nova_free': list(NOVA_FREE), 'peer': PEER, **result},
                  f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
