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

"""How long a scrub keeps a freed unit from the next tenant, per family.

Measured on the nested VM's real kernel (L1, tools/nested/run-l1.sh),
for each family whose hardware QEMU emulates with SR-IOV: the igb NIC's
VFs (``nic_sriov``: ``vf_settings`` then ``flr``) and the NVMe
controller's VFs (``generic``: ``nvme_format`` then ``flr``, each VF
with a private namespace). For each family the unit is given to a
tenant, set up as a tenant leaves it (the VF's MAC, VLAN and trust set
on the PF; 4 KiB written to the namespace), freed, and scrubbed by the
real scrubber through the real privsep daemons, which are up before the
release as nova-compute's are. The time is the scrubber's own: from the
release to the unit being free again. Each family runs with all its
steps and with ``flr`` alone, in the same boot, so the table shows what
each family's own step adds to the reset every family has.

GPUs, FPGAs and QAT have no SR-IOV emulation in QEMU: no time of theirs
can be measured on this machine.

Usage: python benchmarks/scrub_hold.py [--rounds 5]

Needs tools/nested/setup.sh to have run. Writes
``benchmarks/results/scrub-hold.md`` (and ``.json``). L1 runs under TCG
here, which slows every kernel path: the figures order the steps, they
are not what a host with KVM and real devices takes.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
NESTED = os.path.join(REPO_ROOT, 'tools', 'nested')
#: Boot, SR-IOV and every round under TCG on a loaded machine.
L1_TIMEOUT = 1200

#: (family, the PF's kind in L1, driver, steps with all of the family's,
#: and the reset alone).
CASES = (
    ('NIC VF (igb, nic_sriov)', 'igb', 'nic_sriov',
     ('vf_settings+flr', 'flr')),
    ('NVMe VF (QEMU nvme, generic)', 'nvme', 'generic',
     ('nvme_format+flr', 'flr')),
)


def inside(rounds: int, output: str) -> int:
    """The in-L1 part: every case, ``rounds`` times each."""
    sys.path.insert(0, REPO_ROOT)
    from cyborg_nova import scrub
    from tests.realkernel import l1
    from tests.realkernel import scrubl1

    kinds = {'igb': l1.IGB, 'nvme': l1.NVME}
    results = []
    for family, kind, driver, step_sets in CASES:
        for steps in step_sets:
            with tempfile.TemporaryDirectory() as directory:
                host = scrubl1.ScrubHost(directory, steps={driver: steps})
                device = host.device(kinds[kind])
                held, done = [], None
                with host.daemons():
                    for n in range(rounds):
                        consumer = 'tenant-%d' % n
                        unit = host.give(consumer, device)
                        if kind == 'igb':
                            scrubl1.set_tenant_vf(unit, '02:00:00:00:01:%02x'
                                                  % n)
                        else:
                            disk = scrubl1.namespace_disk(unit)[1]
                            scrubl1.write_block(disk, b'tenant %d' % n)
                        host.books.release(consumer, device.provider)
                        outcome = host.scrub_one()
                        if outcome.result != scrub.FREE:
                            raise SystemExit('%s, steps %s: %s' % (
                                family, steps, outcome.reason))
                        if kind == 'nvme' and 'nvme_format' in steps:
                            assert scrubl1.read_block(disk) == bytes(4096)
                        held.append(round(outcome.held_for, 4))
                        done = outcome.done
            results.append({'family': family, 'driver': driver,
                            'steps': steps, 'held_s': held,
                            'last_done': list(done or ())})
    with open(output, 'w') as f:
        json.dump({'kernel': os.uname().release, 'rounds': rounds,
                   'results': results}, f, indent=1)
    return 0


def boot(rounds: int) -> tuple[dict, str]:
    """Boots L1 with tools/nested/l1-scrub-bench.sh; its results."""
    env = dict(os.environ, NESTED_QUIET='1', L1_REPO=REPO_ROOT,
               L1_PYTHON=sys.executable, L1_ROUNDS=str(rounds))
    proc = subprocess.Popen(
        [os.path.join(NESTED, 'run-l1.sh'), '-d', 'both', '-t',
         str(L1_TIMEOUT), os.path.join(NESTED, 'l1-scrub-bench.sh')],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=env, start_new_session=True)
    try:
        _, stderr = proc.communicate(timeout=L1_TIMEOUT + 120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    run_dir = [line.split('run dir ', 1)[1] for line in stderr.splitlines()
               if line.startswith('run-l1: run dir ')]
    path = os.path.join(run_dir[0], 'scrub-hold.json') if run_dir else ''
    if proc.returncode != 0 or not os.path.isfile(path):
        raise SystemExit('the L1 run failed (exit code %s):\n%s'
                         % (proc.returncode, stderr[-3000:]))
    with open(path) as f:
        return json.load(f), run_dir[0]


def _qemu_version() -> str:
    qemu = os.path.join(os.environ.get('NESTED_WORK', os.path.join(
        REPO_ROOT, '.nested')), 'qemu-bpo', 'usr', 'bin',
        'qemu-system-x86_64')
    try:
        out = subprocess.run([qemu, '--version'], capture_output=True,
                             text=True, timeout=30).stdout
    except OSError:
        return 'unknown'
    return out.splitlines()[0] if out else 'unknown'


def report(data: dict, seconds: float, qemu: str) -> str:
    """The Markdown report of ``data`` (what :func:`inside` wrote)."""
    lines = [
        '# Scrub hold: how long a freed unit is kept from the next tenant',
        '',
        'Generated by `benchmarks/scrub_hold.py`: %d rounds per row, in '
        'one boot of the nested VM (%.0f s in all); L1 kernel %s, %s, '
        'under TCG; Python %s; %d CPUs.' % (
            data['rounds'], seconds, data['kernel'], qemu,
            sys.version.split()[0], os.cpu_count() or 0),
        '',
        'Each round gives a VF to a tenant, leaves it as a tenant does '
        '(the VF\'s MAC, VLAN and trust set on its PF; 4 KiB written to '
        'the NVMe VF\'s private namespace), frees it, and times the real '
        'scrubber from the release to the unit being free again, through '
        'the real privsep daemons, up before the release as '
        'nova-compute\'s are. After every NVMe erase the tenant\'s block '
        'read back as zeros.',
        '',
        '| family | steps | n | median s | min s | max s |',
        '|---|---|---:|---:|---:|---:|',
    ]
    medians = {}
    for row in data['results']:
        held = row['held_s']
        medians[(row['family'], row['steps'])] = statistics.median(held)
        lines.append('| %s | `%s` | %d | %.3f | %.3f | %.3f |' % (
            row['family'], row['steps'], len(held),
            statistics.median(held), min(held), max(held)))
    lines += ['', '| family | its own step adds (median) |', '|---|---:|']
    for family, _, _, (full, alone) in CASES:
        if (family, full) in medians and (family, alone) in medians:
            lines.append('| %s | %+.3f s |' % (
                family, medians[(family, full)] - medians[(family, alone)]))
    lines += [
        '',
        'The last round of each row did:',
        '',
    ]
    for row in data['results']:
        lines.append('- %s, `%s`: %s' % (row['family'], row['steps'],
                                         '; '.join(row['last_done'])))
    lines += [
        '',
        'Not measured: GPUs, FPGAs and QAT (QEMU emulates none of them '
        'with SR-IOV). Under TCG every kernel path is slower than on a '
        'host with KVM and real devices, and a real drive\'s erase of a '
        'large namespace takes longer than QEMU\'s of a 16 MiB file: '
        'the table orders the steps, it does not predict a host\'s '
        'times.',
        '',
    ]
    return '\n'.join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--rounds', type=int, default=5,
                        help='rounds per family and steps (default 5)')
    parser.add_argument('--output', default=os.path.join(
        HERE, 'results', 'scrub-hold.md'),
        help='the Markdown report (the JSON is written beside it); in '
             'L1, the JSON itself')
    parser.add_argument('--inside', action='store_true',
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error('--rounds must be at least 1')
    if args.inside:
        return inside(args.rounds, args.output)
    work = os.environ.get('NESTED_WORK',
                          os.path.join(REPO_ROOT, '.nested'))
    if not os.path.isfile(os.path.join(work, 'initramfs-l1.gz')):
        raise SystemExit('run tools/nested/setup.sh first: no nested VM '
                         'is set up')
    start = time.monotonic()
    data, run_dir = boot(args.rounds)
    seconds = time.monotonic() - start
    text = report(data, seconds, _qemu_version())
    print(text)
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, 'w') as f:
        f.write(text)
    with open(os.path.splitext(args.output)[0] + '.json', 'w') as f:
        json.dump(data, f, indent=1)
    print('L1 run: %s' % run_dir, file=sys.stderr)
    return 0


if __name__ == '__main__':
    sys.exit(main())
