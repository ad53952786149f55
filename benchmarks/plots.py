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

"""PNG plots of the benchmark results, from their JSON files.

Reads ``discovery.json``, ``scale.json`` and ``churn.json`` in a results
directory (what ``benchmarks/discovery.py``, ``scale.py`` and ``churn.py``
write) and draws, beside them:

- ``discovery.png``: median discovery time by host size, cyborg-nova,
  upstream Cyborg, one lspci run and the class-scan floor (log scale);
- ``registration.png``: time to register N computes, SQLite and
  PostgreSQL;
- ``candidates.png``: ``GET /allocation_candidates`` median latency, one
  provider per PF against one per VF, by flavor, host count and
  wide-tree setting;
- ``churn.png``: Placement requests a minute at 1,000 computes under 1%
  device churn, both models.

A plot whose JSON is missing is skipped. Needs matplotlib.

Usage: python benchmarks/plots.py [--results DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

SHORT = {'1 QAT VF': 'QAT VF', '1 NIC VF on physnet0': 'NIC VF',
         '1 QAT VF + 1 NIC VF': 'QAT VF\n+ NIC VF',
         '1 T4 (PGPU, not split: control)': 'T4\n(control)'}
COLOURS = {'cyborg-nova': '#2b6cb0', 'upstream': '#c05621',
           'lspci': '#718096', 'floor': '#a0aec0'}


def save(plt, fig, out: str, name: str) -> str:
    path = os.path.join(out, name)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _load(results: str, name: str):
    path = os.path.join(results, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def discovery(plt, data, out: str) -> str:
    hosts = data['hosts']
    sizes = [h['functions'] for h in hosts]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    series = [('cyborg-nova discovery (all drivers)', 'cyborg-nova',
               'cyborg-nova (5 drivers)', 'o'),
              ('upstream Cyborg agent cycle (5 drivers)', 'upstream',
               'upstream Cyborg (5 drivers)', 's'),
              ('lspci -nnn -D (one run)', 'lspci', 'one lspci run', '^'),
              ('class-scan floor', 'floor', 'read every class file', 'v')]
    for key, colour, label, marker in series:
        ys = [statistics.median(h['samples'][key]) for h in hosts
              if key in h['samples']]
        if len(ys) == len(sizes):
            ax.plot(sizes, ys, marker=marker, color=COLOURS[colour],
                    label=label)
            for x, y in zip(sizes, ys):
                ax.annotate('%.0f' % y if y >= 10 else '%.1f' % y, (x, y),
                            textcoords='offset points', xytext=(4, 4),
                            fontsize=7, color=COLOURS[colour])
    ax.set_xscale('log')
    ax.set_yscale('log')
    ax.set_xticks(sizes)
    ax.set_xticklabels(['{:,}'.format(s) for s in sizes])
    ax.set_xlabel('PCI functions on the host')
    ax.set_ylabel('median ms per discovery (log)')
    ax.set_title('Discovery of one host (%s)' % data['machine'].split(
        ', lspci')[0], fontsize=10)
    ax.grid(True, which='both', alpha=0.3)
    ax.legend(fontsize=8)
    return save(plt, fig, out, 'discovery.png')


def registration(plt, data, out: str) -> str | None:
    regs = data.get('registration') or []
    if not regs:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    labels = ['%s, %d worker%s\n{:,} hosts%s'.format(r['hosts'])
              % (r['backend'], r['workers'], '' if r['workers'] == 1
                 else 's', '\ndurable' if r.get('durable') else '')
              for r in regs]
    colours = [('#9ae6b4' if r.get('durable') else '#2f855a')
               if r['backend'] == 'sqlite' else
               ('#90cdf4' if r.get('durable') else '#2b6cb0') for r in regs]
    bars = ax.bar(range(len(regs)), [r['wall_s'] for r in regs],
                  color=colours)
    for bar, r in zip(bars, regs):
        ax.annotate('%.0f s\n{:,} req\n%.0f req/s'.format(r['requests'])
                    % (r['wall_s'], r['req_per_s']),
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha='center', va='bottom', fontsize=7)
    ax.set_xticks(range(len(regs)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel('seconds to register all hosts')
    ax.set_ylim(0, max(r['wall_s'] for r in regs) * 1.3)
    ax.set_title('Registration of computes with 10 accelerators each '
                 '(Placement %s)' % data['machine']['placement'],
                 fontsize=10)
    ax.grid(True, axis='y', alpha=0.3)
    return save(plt, fig, out, 'registration.png')


def candidates(plt, data, out: str) -> str | None:
    cands = data.get('candidates') or {}
    if not cands:
        return None
    flavors = list(data['queries'])
    panels = [(h, s) for h in cands for s in cands[h]]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.3 * len(panels),
                                                      4.4))
    if len(panels) == 1:
        axes = [axes]
    width = 0.38
    for ax, (hosts, setting) in zip(axes, panels):
        shapes = cands[hosts][setting]
        for k, (shape, colour) in enumerate((('per-PF', 'cyborg-nova'),
                                             ('per-VF', 'upstream'))):
            ys, marks = [], []
            for f in flavors:
                cell = shapes[shape][f]
                ys.append(cell.get('median_ms', 0) / 1000.0)
                marks.append('n/r' if cell.get('skipped') else
                             'timeout' if 'median_ms' not in cell else '')
            xs = [i + (k - 0.5) * width for i in range(len(flavors))]
            ax.bar(xs, ys, width, color=COLOURS[colour],
                   label='one provider per %s' % shape[4:])
            timeout = data['args']['timeout']
            for x, y, m in zip(xs, ys, marks):
                if m:
                    # No answer within the client timeout: a hatched bar
                    # up to the timeout (the latency is at least that).
                    ax.bar([x], [timeout], width, fill=False, hatch='//',
                           edgecolor=COLOURS[colour])
                    ax.annotate('> %.0f s' % timeout, (x, timeout),
                                ha='center', va='bottom', fontsize=7)
        for i, f in enumerate(flavors):
            pf = shapes['per-PF'][f].get('median_ms')
            vf = shapes['per-VF'][f].get('median_ms')
            if pf and vf:
                ax.annotate('%.1fx' % (vf / pf), (i, vf / 1000.0),
                            ha='center', va='bottom', fontsize=8)
            elif pf:
                ax.annotate('> %.0fx' % (1000.0 * data['args']['timeout']
                                         / pf),
                            (i, data['args']['timeout'] * 1.06),
                            ha='center', va='bottom', fontsize=8)
        ax.set_xticks(range(len(flavors)))
        ax.set_xticklabels([SHORT.get(f, f[:12]) for f in flavors],
                           fontsize=7)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.12)
        ax.set_title('{:,} hosts, wide-tree %s'.format(int(hosts))
                     % setting, fontsize=9)
        ax.grid(True, axis='y', alpha=0.3)
    axes[0].set_ylabel('median s per GET /allocation_candidates')
    axes[0].legend(fontsize=8, loc='upper left')
    fig.suptitle('Allocation candidates: per-PF (cyborg-nova) vs per-VF '
                 '(upstream Cyborg shape), PostgreSQL %s'
                 % data['machine'].get('postgresql', '').split()[0],
                 fontsize=10)
    return save(plt, fig, out, 'candidates.png')


def churn(plt, data, out: str) -> str | None:
    models = data.get('models') or []
    if not models:
        return None
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    ys = [m['requests_per_min_1000'] for m in models]
    bars = ax.barh(range(len(models)), ys, color=[COLOURS['cyborg-nova'],
                                                  COLOURS['upstream']][
        :len(models)])
    for bar, m in zip(bars, models):
        ax.annotate(' {:,.0f} req/min'.format(m['requests_per_min_1000']),
                    (bar.get_width(), bar.get_y() + bar.get_height() / 2),
                    va='center', fontsize=8)
    ax.set_yticks(range(len(models)))
    ax.set_yticklabels([m['model'].replace(' (', '\n(') for m in models],
                       fontsize=8)
    ax.set_xlim(0, max(ys) * 1.35)
    ax.set_xlabel('Placement requests a minute at {:,} computes '
                  '(extrapolated from a measured sample)'.format(
                      data['args']['hosts']), fontsize=8)
    ax.set_title('Under %g%% device churn a minute' % data['args']['churn'],
                 fontsize=10)
    ax.grid(True, axis='x', alpha=0.3)
    return save(plt, fig, out, 'churn.png')


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--results', default=os.path.join(HERE, 'results'))
    args = parser.parse_args(argv)
    import matplotlib
    matplotlib.use('Agg')
    from matplotlib import pyplot as plt
    made = []
    for name, fn in (('discovery.json', discovery),
                     ('scale.json', registration),
                     ('scale.json', candidates), ('churn.json', churn)):
        data = _load(args.results, name)
        if data is not None:
            path = fn(plt, data, args.results)
            if path:
                made.append(path)
    for path in made:
        print(path)
    return 0


if __name__ == '__main__':
    sys.exit(main())
