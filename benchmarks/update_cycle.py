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

"""CPU of one update cycle on a 2,000-function host: cyborg-nova beside Nova.

The resource tracker's periodic ``update_available_resource`` (which
calls the driver's ``update_provider_tree``) on one compute host whose
accelerators are reported either by cyborg-nova or by Nova's own PCI
tracker with PCI-in-placement, the same units as the same providers
(:mod:`libvirtharness`): the real LibvirtDriver on fakelibvirt, the host
built by ``discovery.cloud_host`` (27 x QAT C62x with 16 VFs, X710 with
32 VFs, A100 with 16 VFs, T4, PAC, U250, plus platform functions).

Steady state: the host registers (service start), runs ``--warmup``
cycles, then ``--cycles`` measured ones; hosts and modes interleave,
``--repeats`` times, the order of the modes alternating. Each cycle's
CPU is thread CPU time of every thread that runs it (Nova runs each
node's update in a pool thread), split by :class:`libvirtharness.
CpuLedger` into cyborg-nova's own code, Nova's PCI code, Placement
(served in-process, in the calling thread) and the rest of Nova. In
the first repeat, one more cycle of each mode runs under cProfile (not
timed) for the top functions.

Writes ``benchmarks/results/update-cycle.md`` and ``update-cycle.json``.

Usage: python benchmarks/update_cycle.py [--sizes 2000] [--cycles 10]
"""

from __future__ import annotations

import cProfile
import os
import statistics
import sys
import time

import sidebyside  # a sibling: the benchmarks run as scripts

HERE = os.path.dirname(os.path.abspath(__file__))
CATEGORIES = ('cyborg-nova', 'nova pci', 'nova driver', 'other',
              'placement')


def merged(spents) -> dict:
    """Several :class:`~libvirtharness.Spent` as one: ms, requests."""
    out = {'requests': 0}
    for spent in spents:
        out['requests'] += spent.requests
        for category, seconds in spent.items():
            out[category] = out.get(category, 0.0) + 1000.0 * seconds
    return out


def compute_ms(sample: dict) -> float:
    """The compute host's CPU: everything but Placement's serving."""
    return sum(v for k, v in sample.items()
               if k not in ('requests', 'placement', 'wall_ms'))


def measure(lh, mode: str, profile: dict, workdir: str, args,
            first: bool) -> dict:
    """One run of ``mode``: its measured cycles.

    The first run also keeps the provider tree and, unless
    ``--no-profile``, one profiled cycle.
    """
    result = {}

    def body(host):
        start = time.perf_counter()
        with host.ledger.window() as main:
            host.start_host()
        result['register'] = dict(
            merged([main] + host.ledger.take(
                '_update_available_resource_for_node')),
            wall_ms=1000.0 * (time.perf_counter() - start))
        for _ in range(args.warmup):
            host.cycle()
        host.ledger.take('_update_available_resource_for_node')
        cycles = []
        for _ in range(args.cycles):
            start = time.perf_counter()
            with host.ledger.window() as main:
                host.cycle()
            wall = time.perf_counter() - start
            cycles.append(dict(merged([main] + host.ledger.take(
                '_update_available_resource_for_node')),
                wall_ms=1000.0 * wall))
        result['cycles'] = cycles
        if first:
            result['tree'] = host.read_tree()
        result['device_spec_entries'] = len(host.device_spec)
        result['overridden'] = host.overridden
        if first and args.profile:
            profiler = cProfile.Profile()
            host.profilers['_update_available_resource_for_node'] = profiler
            host.cycle()
            host.ledger.take('_update_available_resource_for_node')
            dirs = (lh.PROJECT_DIRS if mode == lh.CYBORG_NOVA
                    else lh.NOVA_PCI_DIRS)
            result['profile'] = {
                'reporter': lh.top_functions(profiler, dirs, limit=10),
                'own': lh.top_functions(profiler, by='own', limit=10)}
    lh.run(mode, profile, workdir, body)
    return result


def median_range(values) -> str:
    values = list(values)
    return '%.0f (%.0f-%.0f)' % (statistics.median(values), min(values),
                                 max(values))


def med(samples, key) -> float:
    return statistics.median(s.get(key, 0.0) for s in samples)


def cycles(host: dict, mode: str) -> list[dict]:
    """Every measured cycle of ``host`` in ``mode``, all runs."""
    return [c for r in host['modes'][mode] for c in r['cycles']]


def ratio(ours: list, nova: list, key, nova_key=None) -> float:
    """Median of ``key`` in cyborg-nova's cycles over Nova's.

    ``key`` None: the compute CPU.
    """
    def median_of(samples, k):
        if k is None:
            return statistics.median(compute_ms(s) for s in samples)
        return med(samples, k)
    return median_of(ours, key) / max(median_of(nova, nova_key or key),
                                      1e-9)


def summary(host: dict) -> dict:
    """The medians run_all's summary needs, by mode."""
    out = {}
    for mode in host['modes']:
        samples = cycles(host, mode)
        out[mode] = {
            'cycles': len(samples),
            'compute_ms': statistics.median(compute_ms(s)
                                            for s in samples),
            'compute_min_ms': min(compute_ms(s) for s in samples),
            'compute_max_ms': max(compute_ms(s) for s in samples),
            'reporter_ms': med(samples, 'cyborg-nova'
                               if mode == 'cyborg-nova' else 'nova pci'),
            'placement_ms': med(samples, 'placement'),
            'requests': med(samples, 'requests'),
            'children': len(host['modes'][mode][0]['tree']),
        }
    return out


def report(data: dict) -> str:
    a = data['args']
    lines = [
        '# Update cycle: cyborg-nova beside Nova\'s PCI tracker',
        '',
        'Generated by `benchmarks/update_cycle.py` (%d measured cycles '
        'after %d warm-up cycles per host and mode, %d repeat(s), modes '
        'interleaved; %.0f s in all; %s; %s).'
        % (a['cycles'], a['warmup'], a['repeats'], data['elapsed_s'],
           data['source'],
           data['machine']),
        '',
        '## Set-up',
        '',
        'Nova\'s functional harness in one process: API, conductor, '
        'scheduler, a real Placement (in-memory SQLite, served in-process) '
        'and one compute on the real `LibvirtDriver`, its libvirt Nova\'s '
        'fakelibvirt. The host\'s PCI functions exist twice, as on a real '
        'host: as libvirt node devices, which Nova\'s libvirt driver lists '
        'whichever mode runs, and as a sysfs tree, which cyborg-nova reads. '
        'The same units are reported two ways:',
        '',
        '- **cyborg-nova**: `compute_driver = cyborg_nova.LibvirtDriver`, '
        'its bundled drivers (`nic_sriov` with one physnet per NIC), '
        '`auto_ready = True`.',
        '- **nova-pci**: `compute_driver = libvirt.LibvirtDriver`, `[pci] '
        'report_in_placement = True`, `[filter_scheduler] pci_in_placement '
        '= True` and a `[pci] device_spec` matching exactly the functions '
        'cyborg-nova counts as units, with its resource classes and '
        'traits, written compactly (one entry per product where that '
        'suffices, else one per layout of slots and functions, the buses '
        'as one regex).',
        '',
        'CPU is the thread CPU time (`time.thread_time`) of every thread '
        'that runs the cycle: `update_available_resource` in the caller\'s '
        'thread and each node\'s update in Nova\'s pool thread. It is split '
        'along the call stack: **cyborg-nova** = the project\'s overrides '
        'of Nova\'s driver methods (`update_provider_tree`), less the Nova '
        'methods they call through `super()`; **Nova PCI** = Nova\'s PCI '
        'tracker and its Placement translator '
        '(`update_provider_tree_for_pci`, `PciDevTracker.save`, '
        '`clean_usage`, `PciDeviceStats.to_device_pools_obj`); '
        '**Placement** = Placement serving the requests (in-process, so in '
        'the caller\'s thread); **rest of Nova** = everything else (the '
        'resource tracker, the report client\'s side of each request, the '
        'database). **compute** = all but Placement: what nova-compute '
        'itself spends. Medians over every measured cycle, with min-max.',
        '',
    ]
    lines += [
        '## Results',
        '',
        '| PCI functions | mode | compute CPU ms | cyborg-nova code | Nova '
        'PCI code | rest of Nova | Placement CPU ms | Placement requests | '
        'wall ms |',
        '|---:|---|---:|---:|---:|---:|---:|---:|---:|',
    ]
    for host in data['hosts']:
        for mode in ('cyborg-nova', 'nova-pci'):
            samples = cycles(host, mode)
            lines.append(
                '| {:,} | %s | %s | %.0f | %.0f | %.0f | %s | %.0f | %s |'
                .format(host['functions']) % (
                    mode, median_range(compute_ms(s) for s in samples),
                    med(samples, 'cyborg-nova'), med(samples, 'nova pci'),
                    statistics.median(s.get('other', 0.0)
                                      + s.get('nova driver', 0.0)
                                      for s in samples),
                    median_range(s.get('placement', 0.0) for s in samples),
                    med(samples, 'requests'),
                    median_range(s['wall_ms'] for s in samples)))
    lines.append('')
    for host in data['hosts']:
        modes = host['modes']
        ours, nova = cycles(host, 'cyborg-nova'), cycles(host, 'nova-pci')
        trees = [modes[m][0]['tree'] for m in ('cyborg-nova', 'nova-pci')]
        same = ([t[:2] + t[3:] for t in trees[0]]
                == [t[:2] + t[3:] for t in trees[1]])
        reserved = [sum(t[2] for t in tree) for tree in trees]
        lines.append(
            '- {:,} PCI functions (%s). Child providers: cyborg-nova %d, '
            'nova-pci %d, %s; reserved units %d and %d; nova-pci '
            '`device_spec` entries: %d. Ratios cyborg-nova / nova-pci: '
            'compute CPU **%.2fx**, the reporter\'s own code (cyborg-nova\'s '
            'against Nova\'s PCI code) %.2fx, Placement CPU %.2fx, '
            'Placement requests %.2fx. First registration (service start, '
            'median of the runs): cyborg-nova %.0f ms compute CPU and %.0f '
            'requests, nova-pci %.0f ms and %.0f requests.'.format(
                host['functions']) % (
                host['description'], len(trees[0]), len(trees[1]),
                'the same classes, totals and custom traits' if same else
                '**different classes, totals or traits**', reserved[0],
                reserved[1], modes['nova-pci'][0]['device_spec_entries'],
                ratio(ours, nova, None), ratio(ours, nova, 'cyborg-nova',
                                               'nova pci'),
                ratio(ours, nova, 'placement'),
                ratio(ours, nova, 'requests'),
                *[statistics.median(f(r['register']) for r in modes[m])
                  for m in ('cyborg-nova', 'nova-pci')
                  for f in (compute_ms, lambda s: s['requests'])]))
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
                'cProfile of one more cycle (not timed; profiling slows '
                'it), %s by cumulative time (what they and what they call '
                'took):' % what,
                '',
                '| function | calls | own ms | cumulative ms |',
                '|---|---:|---:|---:|',
            ]
            lines += ['| `%s` | %d | %.1f | %.1f |' % tuple(r)
                      for r in prof['reporter']]
            lines += ['', 'Top of the whole cycle by own time (any code, '
                      'Placement\'s and the database\'s included): %s.'
                      % '; '.join('`%s` %.0f ms' % (r[0], r[2])
                                  for r in prof['own'][:6])]
    lines.append('')
    lines += [
        '## Notes',
        '',
        '- Placement runs in-process on in-memory SQLite: its CPU per '
        'request is this harness\'s, not a production Placement\'s; the '
        'request counts are what any Placement would serve.',
        '- Nova 34 lists the host\'s PCI devices from libvirt once per '
        'process (`_get_pci_passthrough_devices` is cached) and builds its '
        'PCI tracker at service start, so steady cycles of nova-pci do '
        'not read the devices again; cyborg-nova reads sysfs in every '
        'cycle, which is how it sees devices change without a restart.',
        '- CPU of the cycle\'s other threads (none run in this harness: '
        'Nova\'s periodic tasks are off) is not counted.',
        '- Reserved units differ where cyborg-nova holds a device back: '
        'it reserves the A100s\' SR-IOV VFs until a vGPU type is enabled '
        'for them (`[cyborg_nvidia_gpu] enabled_vgpu_types`), which Nova\'s '
        'passthrough offers as they are; classes, totals and traits are '
        'the same.',
    ]
    return '\n'.join(lines) + '\n'


def main(argv=None) -> int:
    parser = sidebyside.parser(__doc__, '2000', 'update-cycle.md')
    parser.add_argument('--cycles', type=int, default=10,
                        help='measured cycles per run (default 10)')
    parser.add_argument('--warmup', type=int, default=2,
                        help='cycles after the registration, not measured '
                             '(default 2)')
    args = parser.parse_args(argv)
    discovery, lh = sidebyside.load_harness()
    # What was imported: the code measured.
    source = lh.source_state()
    start = time.perf_counter()
    hosts = sidebyside.run_hosts(
        args, discovery, lh, 'update-cycle-',
        lambda mode, profile, workdir, repeat: measure(
            lh, mode, profile, workdir, args, repeat == 0))
    for host in hosts:
        host['summary'] = summary(host)
    sidebyside.write({'args': vars(args), 'source': source,
                      'machine': sidebyside.machine(), 'hosts': hosts},
                     report, args.output, start)
    return 0


if __name__ == '__main__':
    sys.exit(main())
