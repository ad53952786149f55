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

"""Spawn path with 2 VFs: cyborg-nova beside Nova's own PCI passthrough.

The time from the build request (``POST /servers``) to ACTIVE, same host,
a flavor with 2 QAT VFs, asked for either way (:mod:`libvirtharness`:
the real LibvirtDriver on fakelibvirt, the host built by
``discovery.cloud_host``):

- ``cyborg-nova``: ``resources:CUSTOM_QAT=2``, its resource class;
- ``nova-pci``: ``pci_passthrough:alias=qat:2``, ``[pci] alias`` of the
  same resource class on VFs, PCI in Placement and the
  ``PciPassthroughFilter``.

Each run starts the host, builds ``--warmup`` servers (not measured),
then ``--runs`` servers one at a time (each deleted before the next);
hosts and modes interleave, ``--repeats`` times, the order of the modes
alternating. Beside the wall time, the CPU the driver's ``spawn`` and
the whole build on the compute (``_build_and_run_instance``, whose claim
updates the provider tree) took, in the threads that ran them, split by
:class:`libvirtharness.CpuLedger`: what the project's hooks add
(whatever they are called: every cyborg-nova override of Nova's driver
methods is charged), Nova's PCI code, Placement and the rest. In the
first repeat, two more builds of each mode run under cProfile (not
timed): one profiling the driver's ``spawn``, one the whole build. Each
guest's XML is checked for its two ``<hostdev>``.

Writes ``benchmarks/results/spawn-path.md`` and ``spawn-path.json``.

Usage: python benchmarks/spawn_path.py [--sizes 100,2000] [--runs 5]
"""

from __future__ import annotations

import cProfile
import json
import os
import statistics
import sys
import time

import sidebyside  # a sibling: the benchmarks run as scripts

HERE = os.path.dirname(os.path.abspath(__file__))
RESOURCE_CLASS = 'CUSTOM_QAT'
VFS = 2
#: (name, start stamp, end stamp) of each stretch of a build.
PHASES = (('API, conductor, scheduler', 'posted',
           '_build_and_run_instance start'),
          ('compute: claim, prepare', '_build_and_run_instance start',
           'spawn start'),
          ('driver spawn', 'spawn start', 'spawn end'),
          ('to ACTIVE', 'spawn end', 'active'))


def ms(spent) -> dict:
    out = {k: 1000.0 * v for k, v in spent.items()}
    out['requests'] = spent.requests
    return out


def compute_ms(sample: dict) -> float:
    """The compute host's CPU: everything but Placement's serving."""
    return sum(v for k, v in sample.items()
               if k not in ('requests', 'placement'))


def flavor_extra_spec(lh, mode: str) -> dict:
    if mode == lh.CYBORG_NOVA:
        return {'resources:%s' % RESOURCE_CLASS: str(VFS)}
    return {'pci_passthrough:alias': 'qat:%d' % VFS}


def measure(lh, mode: str, profile: dict, workdir: str, args,
            profiled: bool) -> dict:
    result = {'runs': []}

    def body(host):
        if mode == lh.NOVA_PCI:
            host.flags(alias=[json.dumps({
                'name': 'qat', 'device_type': 'type-VF',
                'resource_class': RESOURCE_CLASS})], group='pci')
        host.start_host()
        flavor = host._create_flavor(memory_mb=512, vcpu=1, disk=1,
                                     extra_spec=flavor_extra_spec(lh, mode))

        def build():
            run = host.spawn(flavor)
            host.delete(run['server'])
            return run
        for _ in range(args.warmup):
            build()
        for _ in range(args.runs):
            run = build()
            st = run['stamps']
            result['runs'].append({
                'wall_ms': 1000.0 * (st['active'] - st['posted']),
                'phases_ms': {name: 1000.0 * (st[b] - st[a])
                              for name, a, b in PHASES},
                'spawn': ms(run['spawn'][0]),
                'build': ms(run['build'][0]),
                'hostdevs': run['hostdevs']})
        result['device_spec_entries'] = len(host.device_spec)
        result['overridden'] = host.overridden
        if profiled:
            dirs = (lh.PROJECT_DIRS if mode == lh.CYBORG_NOVA
                    else lh.NOVA_PCI_DIRS)
            result['profile'] = {}
            # The driver's spawn alone, then the whole build: one
            # profiler a thread at a time.
            for name, key in (('spawn', 'spawn'),
                              ('_build_and_run_instance', 'build')):
                profiler = cProfile.Profile()
                host.profilers[name] = profiler
                build()
                result['profile'][key] = {
                    'reporter': lh.top_functions(profiler, dirs, limit=12),
                    'own': lh.top_functions(profiler, by='own', limit=8)}
    lh.run(mode, profile, workdir, body)
    return result


def median_range(values) -> str:
    values = list(values)
    return '%.0f (%.0f-%.0f)' % (statistics.median(values), min(values),
                                 max(values))


def med(values) -> float:
    return statistics.median(list(values))


def summary(host: dict) -> dict:
    """The medians run_all's summary and the tables need, by mode."""
    out = {}
    for mode, results in host['modes'].items():
        runs = [r for res in results for r in res['runs']]
        out[mode] = {
            'runs': len(runs),
            'wall_ms': med(r['wall_ms'] for r in runs),
            'wall_min_ms': min(r['wall_ms'] for r in runs),
            'wall_max_ms': max(r['wall_ms'] for r in runs),
            'spawn_cpu_ms': med(compute_ms(r['spawn']) for r in runs),
            'spawn_project_ms': med(r['spawn'].get('cyborg-nova', 0.0)
                                    for r in runs),
            'spawn_placement_ms': med(r['spawn'].get('placement', 0.0)
                                      for r in runs),
            'spawn_requests': med(r['spawn']['requests'] for r in runs),
            'build_cpu_ms': med(compute_ms(r['build']) for r in runs),
            'build_project_ms': med(r['build'].get('cyborg-nova', 0.0)
                                    for r in runs),
            'build_nova_pci_ms': med(r['build'].get('nova pci', 0.0)
                                     for r in runs),
            'build_placement_ms': med(r['build'].get('placement', 0.0)
                                      for r in runs),
            'build_requests': med(r['build']['requests'] for r in runs),
            'hostdevs': sorted({len(r['hostdevs']) for r in runs}),
        }
    return out


def report(data: dict) -> str:
    a = data['args']
    lines = [
        '# Spawn path with %d VFs: cyborg-nova beside Nova\'s PCI '
        'passthrough' % VFS,
        '',
        'Generated by `benchmarks/spawn_path.py` (%d measured build(s) '
        'after %d warm-up build(s) per host and mode, %d repeat(s), modes '
        'interleaved; %.0f s in all; %s; %s).'
        % (a['runs'], a['warmup'], a['repeats'], data['elapsed_s'],
           data['source'],
           data['machine']),
        '',
        '## Set-up',
        '',
        'Nova\'s functional harness in one process: API, conductor, '
        'scheduler, a real Placement (in-memory SQLite, served in-process) '
        'and one compute on the real `LibvirtDriver`, its libvirt Nova\'s '
        'fakelibvirt, whose node devices are the host\'s PCI functions; '
        'cyborg-nova reads the same functions from a sysfs tree. A flavor '
        'asks for %d QAT VFs:' % VFS,
        '',
        '- **cyborg-nova**: `compute_driver = cyborg_nova.LibvirtDriver`, '
        'flavor `resources:%s=%d`.' % (RESOURCE_CLASS, VFS),
        '- **nova-pci**: `compute_driver = libvirt.LibvirtDriver`, flavor '
        '`pci_passthrough:alias=qat:%d`, `[pci] alias = {"name": "qat", '
        '"device_type": "type-VF", "resource_class": "%s"}`, `[pci] '
        'device_spec` for the same units (as in the update-cycle '
        'benchmark), `[pci] report_in_placement`, `[filter_scheduler] '
        'pci_in_placement` and the `PciPassthroughFilter`.'
        % (VFS, RESOURCE_CLASS),
        '',
        '**Wall** = from just before `POST /servers` to the moment the '
        'compute saved the instance ACTIVE (a hook on `Instance.save`: the '
        'harness\'s own wait polls every 0.5 s). Each server is deleted '
        'before the next. **CPU** = thread CPU time of the thread that '
        'ran the driver\'s `spawn` (or the whole build on the compute, '
        '`_build_and_run_instance`, whose resource claim updates the '
        'provider tree), split along the call stack: **cyborg-nova** = '
        'the project\'s overrides of Nova\'s driver methods (`spawn`, '
        '`_get_guest_config`, `update_provider_tree`...), less the Nova '
        'methods they call through `super()`; **Nova PCI** = Nova\'s PCI '
        'claim, tracker and Placement translator; **Placement** = '
        'Placement serving requests (in-process, so in the caller\'s '
        'thread); **compute** = all but Placement. Medians with min-max.',
        '',
        'Project hooks found and charged: %s.' % ', '.join(
            '`%s`' % n for n in data.get('overridden', [])),
    ]
    lines += [
        '',
        '## Results',
        '',
        'Wall time, median (min-max) of every measured build, and the '
        'median of each stretch of it.',
        '',
        '| PCI functions | mode | builds | POST to ACTIVE ms | ' + ' | '.join(
            '%s ms' % p for p, _, _ in PHASES) + ' | hostdevs |',
        '|---:|---|---:|---:|' + '---:|' * len(PHASES) + '---:|',
    ]
    for host in data['hosts']:
        for mode in ('cyborg-nova', 'nova-pci'):
            runs = [r for res in host['modes'][mode] for r in res['runs']]
            lines.append('| {:,} | %s | %d | %s | %s | %s |'.format(
                host['functions']) % (
                mode, len(runs), median_range(r['wall_ms'] for r in runs),
                ' | '.join('%.0f' % med(r['phases_ms'][p] for r in runs)
                           for p, _, _ in PHASES),
                '/'.join(map(str, host['summary'][mode]['hostdevs']))))
    lines += [
        '',
        'CPU, medians: the driver\'s `spawn` and the whole build on the '
        'compute.',
        '',
        '| PCI functions | mode | spawn: compute CPU ms | of which '
        'cyborg-nova | Placement CPU ms (requests) | build: compute CPU ms '
        '| of which cyborg-nova | of which Nova PCI | Placement CPU ms '
        '(requests) |',
        '|---:|---|---:|---:|---:|---:|---:|---:|---:|',
    ]
    for host in data['hosts']:
        for mode in ('cyborg-nova', 'nova-pci'):
            m = host['summary'][mode]
            lines.append(
                '| {:,} | %s | %.1f | %.1f | %.1f (%d) | %.0f | %.0f | '
                '%.0f | %.0f (%d) |'.format(host['functions']) % (
                    mode, m['spawn_cpu_ms'], m['spawn_project_ms'],
                    m['spawn_placement_ms'], m['spawn_requests'],
                    m['build_cpu_ms'], m['build_project_ms'],
                    m['build_nova_pci_ms'], m['build_placement_ms'],
                    m['build_requests']))
    lines.append('')
    for host in data['hosts']:
        ours, nova = host['summary']['cyborg-nova'], \
            host['summary']['nova-pci']
        lines.append(
            '- {:,} PCI functions (%s; nova-pci `device_spec` entries: '
            '%d). Ratios cyborg-nova / nova-pci: POST to ACTIVE **%.2fx**; '
            'spawn compute CPU %.2fx; build compute CPU %.2fx; Placement '
            'requests of the build %.2fx. CPU cyborg-nova adds inside '
            '`spawn`: **%.1f ms** (and %.1f ms of Placement\'s for %d '
            'request(s)).'.format(host['functions']) % (
                host['description'],
                host['modes']['nova-pci'][0]['device_spec_entries'],
                ours['wall_ms'] / nova['wall_ms'],
                ours['spawn_cpu_ms'] / nova['spawn_cpu_ms'],
                ours['build_cpu_ms'] / nova['build_cpu_ms'],
                ours['build_requests'] / max(nova['build_requests'], 1),
                ours['spawn_project_ms'], ours['spawn_placement_ms'],
                ours['spawn_requests']))
    for host in data['hosts']:
        for mode, what in (('cyborg-nova', 'cyborg-nova\'s functions'),
                           ('nova-pci', 'Nova\'s PCI functions')):
            prof = host['modes'][mode][0].get('profile')
            if not prof:
                continue
            lines += [
                '',
                '## Where the time goes: {:,} PCI functions, %s'.format(
                    host['functions']) % mode,
                '',
                'cProfile of two more builds (not timed; profiling slows '
                'them), %s by cumulative time (what they and what they '
                'call took, Placement\'s serving included): first the '
                'driver\'s `spawn` alone, then the whole build on the '
                'compute.' % what,
            ]
            for key, label in (('spawn', 'spawn'), ('build', 'build')):
                lines += [
                    '',
                    '| %s: function | calls | own ms | cumulative ms |'
                    % label,
                    '|---|---:|---:|---:|',
                ]
                lines += ['| `%s` | %d | %.1f | %.1f |' % tuple(r)
                          for r in prof[key]['reporter']]
                lines += ['', 'Top of the whole %s by own time (any code, '
                          'Placement\'s and the database\'s included): %s.'
                          % (label, '; '.join(
                              '`%s` %.0f ms' % (r[0], r[2])
                              for r in prof[key]['own'][:6]))]
    lines += [
        '',
        '## Notes',
        '',
        '- The build\'s resource claim (`instance_claim`) runs the '
        'resource tracker\'s update of the provider tree, so the build '
        'pays one `update_provider_tree` in both modes: see the update '
        'cycle benchmark for its cost alone.',
        '- Placement runs in-process on in-memory SQLite: its CPU per '
        'request is this harness\'s, not a production Placement\'s.',
        '- Times include the harness\'s RPC (oslo.messaging\'s fake '
        'driver) between API, conductor, scheduler and compute.',
    ]
    return '\n'.join(lines) + '\n'


def main(argv=None) -> int:
    parser = sidebyside.parser(__doc__, '100,2000', 'spawn-path.md')
    parser.add_argument('--runs', type=int, default=5,
                        help='measured builds per run (default 5)')
    parser.add_argument('--warmup', type=int, default=1,
                        help='builds per run before the measured ones '
                             '(default 1)')
    args = parser.parse_args(argv)
    discovery, lh = sidebyside.load_harness()
    # What was imported: the code measured.
    source = lh.source_state()
    start = time.perf_counter()
    overridden = []

    def one(mode, profile, workdir, repeat):
        nonlocal overridden
        result = measure(lh, mode, profile, workdir, args,
                         args.profile and repeat == 0)
        overridden = overridden or (
            result['overridden'] if mode == lh.CYBORG_NOVA else [])
        return result
    hosts = sidebyside.run_hosts(args, discovery, lh, 'spawn-path-', one)
    for host in hosts:
        host['summary'] = summary(host)
    sidebyside.write({'args': vars(args), 'source': source,
                      'machine': sidebyside.machine(), 'hosts': hosts,
                      'overridden': overridden},
                     report, args.output, start)
    return 0


if __name__ == '__main__':
    sys.exit(main())
