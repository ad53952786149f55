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

"""Run every benchmark and write ``benchmarks/results.md`` and the plots.

One command for the whole suite:

    python benchmarks/run_all.py            # full run (~55 min on 2 cores)
    python benchmarks/run_all.py --quick    # small sizes (~15 min)
    python benchmarks/run_all.py --smoke    # tiny sizes (a few minutes)

Steps, each a process of its own (a failed step is reported and the rest
still run): ``discovery.py`` (hosts of 100, 600 and 2,000 PCI functions,
against lspci and upstream Cyborg's drivers), ``placement_traffic.py``
(requests per compute, in Nova's functional harness),
``fence_latency.py`` (udev remove to Placement fenced), ``reprogram.py``
(FPGA reprogramming overhead and concurrency), ``scale.py``
(registration of 100 and 1,000 computes on SQLite and PostgreSQL;
allocation candidates at 1,000 and 5,000 hosts, per-PF against per-VF,
wide-tree setting off and on), ``churn.py``
(requests a minute at 1,000 computes under 1% device churn),
``cli_start.py`` (start time of the ``cyborg-nova`` command against
``openstack --version``), ``spawn_path.py`` (``POST /servers`` to ACTIVE
with 2 VFs and the CPU inside ``spawn``, against Nova's own PCI
passthrough, on the real LibvirtDriver), ``update_cycle.py`` (CPU of one
``update_available_resource`` on a 2,000-function host, against Nova's
PCI tracker), then ``plots.py``.

The full run writes ``benchmarks/results.md``, ``benchmarks/results/``
and copies the plots to ``doc/source/_static/benchmarks/`` for
``doc/source/admin/performance.rst``. ``--quick`` and ``--smoke`` write
everything under ``benchmarks/.work/quick/`` or ``benchmarks/.work/smoke/``
instead (not kept in git), so they never overwrite the recorded results;
both keep every comparison, only the sizes shrink.

Needs ``tools/setup-bench-venvs.sh`` to have run (PostgreSQL, pciutils,
``.venv-placement``, ``.venv-cyborg``), umockdev for the fence latency
(``tools/install-udev-test-deps.sh``), and matplotlib in this venv.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
DOC_IMAGES = os.path.join(REPO_ROOT, 'doc', 'source', '_static',
                          'benchmarks')


# Each step's arguments by mode. The full run's sizes are the issue's
# (discovery at 100/600/2,000 functions, registration of 100 and 1,000
# computes, candidates at 1,000 and 5,000 hosts, churn at 1,000); its
# flags only shorten the sampling, so that the whole run stays under an
# hour on 2 cores. ``smoke`` is the smallest run that still makes every
# comparison: the test suite runs it to prove the command works.
STEP_ARGS = {
    'discovery': {
        'full': ['--runs', '9'],
        'quick': ['--runs', '5'],
        'smoke': ['--runs', '1', '--sizes', '100']},
    'placement-traffic': {
        'full': ['--repeats', '1'],
        'quick': ['--repeats', '1', '--cycles', '3', '--refreshes', '1',
                  '--synthetic-pfs', '8'],
        'smoke': ['--repeats', '1', '--cycles', '1', '--refreshes', '1',
                  '--synthetic-pfs', '2']},
    'fence-latency': {
        'full': ['--rounds', '20'],
        'quick': ['--rounds', '5'],
        'smoke': ['--rounds', '2']},
    'reprogram': {
        'full': ['--rounds', '20', '--fpgas', '8', '--delay', '1'],
        'quick': ['--rounds', '5', '--fpgas', '8', '--delay', '1'],
        'smoke': ['--rounds', '2', '--fpgas', '2', '--delay', '0.2']},
    'scale': {
        # A per-VF query at 5,000 hosts takes minutes: one sample of
        # such a cell, and a timeout that lets it answer.
        'full': ['--durable-check', '30', '--samples', '5',
                 '--min-samples', '1', '--budget', '15', '--timeout', '180'],
        'quick': ['--quick'],
        'smoke': ['--register-hosts', '2', '--durable-check', '2',
                  '--candidate-hosts', '20,40', '--samples', '1',
                  '--min-samples', '1', '--budget', '5', '--timeout', '60',
                  '--clients', '1', '--threads', '2']},
    'churn': {
        'full': ['--sample', '40', '--sample-vf', '8', '--duration', '120'],
        'quick': ['--quick'],
        'smoke': ['--hosts', '20', '--sample', '4', '--sample-vf', '2',
                  '--duration', '20', '--churn', '20']},
    'cli-start': {
        'full': ['--runs', '20'],
        'quick': ['--runs', '5'],
        'smoke': ['--runs', '1', '--warmup', '0']},
    # Nova's harness starts in a few seconds; a 2,000-function host takes
    # 10-20 s to register and a few seconds a build or cycle.
    'spawn-path': {
        'full': ['--sizes', '100,2000', '--runs', '5', '--repeats', '3'],
        'quick': ['--sizes', '100,600', '--runs', '3', '--repeats', '1'],
        'smoke': ['--sizes', '100', '--runs', '1', '--warmup', '0',
                  '--repeats', '1']},
    'update-cycle': {
        'full': ['--sizes', '2000', '--cycles', '10', '--repeats', '3'],
        'quick': ['--sizes', '600', '--cycles', '5', '--repeats', '1'],
        'smoke': ['--sizes', '100', '--cycles', '1', '--warmup', '1',
                  '--repeats', '1']},
}
SCRIPTS = {'discovery': 'discovery.py',
           'placement-traffic': 'placement_traffic.py',
           'fence-latency': 'fence_latency.py', 'reprogram': 'reprogram.py',
           'scale': 'scale.py', 'churn': 'churn.py',
           'cli-start': 'cli_start.py', 'spawn-path': 'spawn_path.py',
           'update-cycle': 'update_cycle.py'}
MODES = ('full', 'quick', 'smoke')


def steps(out: str, mode: str) -> list[tuple[str, list[str], str]]:
    """(name, command, output file) of each step, in order."""
    result = []
    for name, script in SCRIPTS.items():
        path = os.path.join(out, 'results', name + '.md')
        result.append((name, [sys.executable, os.path.join(HERE, script)] +
                       STEP_ARGS[name][mode] + ['--output', path], path))
    return result


def mode_flag(mode: str) -> str:
    """The option that picks ``mode`` ('' for the full run)."""
    return '' if mode == 'full' else ' --' + mode


class OtherCpu(threading.Thread):
    """CPU seconds that processes other than ours use, sampled every 2 s.

    Other users of the machine compete for the same cores and slow what
    is measured. Ours: this process's descendants and the ``postgres``
    user's processes (the benchmarks' own PostgreSQL). A process that
    lives less than one sample is missed.
    """

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.total = 0.0
        self.seen = {}
        self.stop_event = threading.Event()
        self.tick = os.sysconf('SC_CLK_TCK')
        try:
            import pwd
            self.skip_uid = pwd.getpwnam('postgres').pw_uid
        except (ImportError, KeyError):
            self.skip_uid = -1

    def sample(self) -> None:
        procs = {}
        for entry in os.listdir('/proc'):
            if not entry.isdigit():
                continue
            try:
                with open('/proc/%s/stat' % entry) as f:
                    fields = f.read().rsplit(')', 1)[1].split()
                uid = os.stat('/proc/%s' % entry).st_uid
            except OSError:
                continue
            procs[int(entry)] = (int(fields[1]),
                                 int(fields[11]) + int(fields[12]), uid)
        ours = {os.getpid()}
        changed = True
        while changed:
            changed = False
            for pid, (ppid, _, _) in procs.items():
                if ppid in ours and pid not in ours:
                    ours.add(pid)
                    changed = True
        seen = {}
        for pid, (_, ticks, uid) in procs.items():
            if pid in ours or uid == self.skip_uid:
                continue
            seen[pid] = ticks
            self.total += (ticks - self.seen.get(pid, ticks)) / self.tick
        self.seen = seen

    def run(self) -> None:
        while not self.stop_event.wait(2.0):
            self.sample()

    def stop(self) -> float:
        self.stop_event.set()
        self.join()
        return self.total


def _log_dir(out: str) -> str:
    # Logs of a full run stay out of git (benchmarks/.work is ignored).
    return os.path.join(HERE, '.work', 'logs') if out == HERE else \
        os.path.join(out, 'logs')


def run_steps(out: str, mode: str, only: set | None) -> dict:
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join(
        p for p in (REPO_ROOT, env.get('PYTHONPATH')) if p)
    env.setdefault('PYTHONWARNINGS', 'ignore')
    env.setdefault('OS_NOVA_DISABLE_EVENTLET_PATCHING', '1')
    log_dir = _log_dir(out)
    os.makedirs(log_dir, exist_ok=True)
    os.makedirs(os.path.join(out, 'results'), exist_ok=True)
    done = {}
    for name, cmd, path in steps(out, mode):
        if only and name not in only:
            continue
        shown = [os.path.relpath(c, REPO_ROOT) if c.startswith(REPO_ROOT)
                 else c for c in cmd]
        print('== %s: %s' % (name, ' '.join(shown)), flush=True)
        start = time.perf_counter()
        sampler = OtherCpu()
        sampler.sample()
        sampler.start()
        with open(os.path.join(log_dir, name + '.log'), 'w') as logf:
            proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env,
                                  stdout=logf, stderr=subprocess.STDOUT)
        seconds = time.perf_counter() - start
        # CPU the rest of the machine used meanwhile (other users' work
        # competes for the same cores and slows what is measured).
        other = sampler.stop()
        # Repository-relative: the file is committed with the results.
        done[name] = {'seconds': seconds, 'returncode': proc.returncode,
                      'output': os.path.relpath(path, REPO_ROOT),
                      'other_cpu_share': other / (seconds * (os.cpu_count()
                                                             or 1))}
        # After every step: an interrupted run keeps what it measured.
        steps_path = os.path.join(out, 'results', 'steps.json')
        recorded = _read(steps_path) or {}
        recorded.update(done)
        with open(steps_path, 'w') as f:
            json.dump(recorded, f, indent=1)
        print('   %s in %.0f s' % ('ok' if proc.returncode == 0 else
                                   'FAILED (%d, see %s)' % (
                                       proc.returncode, os.path.relpath(
                                           os.path.join(log_dir,
                                                        name + '.log'),
                                           REPO_ROOT)),
                                   seconds), flush=True)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, os.path.join(HERE, 'plots.py'),
                           '--results', os.path.join(out, 'results')],
                          cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True)
    done['plots'] = {'seconds': time.perf_counter() - start,
                     'returncode': proc.returncode,
                     'pngs': [os.path.relpath(p, REPO_ROOT)
                              for p in proc.stdout.split()]}
    if proc.returncode:
        print('plots FAILED:\n' + proc.stderr[-2000:])
    return done


# -- results.md --------------------------------------------------------------

def _read(path: str):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f) if path.endswith('.json') else f.read()


def _md_rows(text: str, first_cell: str) -> list[list[str]]:
    rows = []
    for line in (text or '').splitlines():
        if line.startswith('| ' + first_cell):
            rows.append([c.strip() for c in line.strip().strip('|')
                         .split('|')])
    return rows


def machine_base() -> str:
    return '%d cores, Python %s' % (os.cpu_count() or 0,
                                    platform.python_version())


#: Summary row (by its first words) -> the step that measured it.
ROW_STEPS = (('Discovery', 'discovery'),
             ('Placement traffic', 'placement-traffic'),
             ('Event latency', 'fence-latency'),
             ('FPGA reprogramming', 'reprogram'), ('Scale', 'scale'),
             ('Convergence', 'churn'), ('CLI start', 'cli-start'),
             ('Spawn path', 'spawn-path'), ('Update cycle', 'update-cycle'))


def summary_rows(res: str, done: dict | None = None) -> list[tuple]:
    """(benchmark, what was compared, result, ratio, machine) rows.

    With ``done`` (the steps run), each machine cell also says how much
    of the CPU other users' processes took while its step ran.
    """
    rows = _summary_rows(res)
    out = []
    for row in rows:
        step = next((s for prefix, s in ROW_STEPS
                     if row[0].startswith(prefix)), None)
        share = (done or {}).get(step, {}).get('other_cpu_share')
        if share is not None:
            row = row[:4] + ('%s; other users\' processes took %.0f%% of '
                             'the CPU meanwhile' % (row[4], 100 * share),)
        out.append(row)
    return out


def _summary_rows(res: str) -> list[tuple]:
    rows = []
    disc = _read(os.path.join(res, 'discovery.json'))
    if disc:
        for h in disc['hosts']:
            s = h['samples']
            ours = statistics.median(s['cyborg-nova discovery (all '
                                       'drivers)'])
            lspci = statistics.median(s['lspci -nnn -D (one run)'])
            up = s.get('upstream Cyborg agent cycle (5 drivers)')
            mem = h['memory']['cyborg-nova discovery (all drivers)']
            rows.append((
                'Discovery, {:,} PCI functions'.format(h['functions']),
                'cyborg-nova (5 drivers) vs one `lspci -nnn -D` run',
                '%.1f ms vs %.1f ms' % (ours, lspci),
                '%.2fx the time of lspci' % (ours / lspci),
                disc['machine'] + ', fake sysfs tree'))
            if up:
                upm = statistics.median(up)
                umem = h['memory'].get('upstream Cyborg agent cycle (5 '
                                       'drivers)', {})
                rows.append((
                    'Discovery, {:,} PCI functions'.format(h['functions']),
                    'cyborg-nova vs upstream Cyborg 17 agent cycle (its 5 '
                    'drivers, same tree); peak RSS of one discovery',
                    '%.1f ms vs %.0f ms; %.0f MiB vs %.0f MiB' % (
                        ours, upm, mem['hwm_after_kib'] / 1024.0,
                        umem.get('hwm_after_kib', 0) / 1024.0),
                    'Cyborg takes **%.0fx** as long' % (upm / ours),
                    disc['machine'] + ', fake sysfs tree'))
    traffic = _read(os.path.join(res, 'placement-traffic.md'))
    if traffic:
        py = re.search(r'Python ([0-9.]+)', traffic)
        m = 'Nova 34 functional harness, Placement 16 in-process, ' \
            'in-memory SQLite, Python %s, %d cores' % (
                py.group(1) if py else '?', os.cpu_count() or 0)
        for row in _md_rows(traffic, ''):
            if len(row) != 10:
                continue
            host, phase = row[0], row[1]
            if phase.startswith(('1.', '2.')) and host != 'fpga-host':
                est = row[9].replace('~', '').replace('>= ', '')
                ratio = ('%.1fx fewer than the Cyborg-shape ESTIMATE (%s)'
                         % (float(est) / float(row[2]), row[9])
                         if est.replace('.', '').isdigit()
                         and float(row[2]) else 'n/a')
                rows.append((
                    'Placement traffic per compute (%s), %s' % (host, phase),
                    'cyborg-nova vs Nova\'s PCI-in-placement (measured) '
                    'vs upstream Cyborg\'s shape (estimate)',
                    '%s vs %s requests' % (row[2], row[5]),
                    'same as Nova (%s); %s' % (row[8], ratio), m))
    fence = _read(os.path.join(res, 'fence-latency.md'))
    if fence:
        row = _md_rows(fence, '**uevent to Placement fenced**')
        if row:
            median = float(row[0][2])
            rows.append((
                'Event latency: device removed to fenced in Placement',
                'cyborg-nova agent (udev, measured) vs the next periodic '
                'update (60 s period: 30 s on average; upstream Cyborg\'s '
                'agent polls every 60 s; Nova\'s PCI-in-placement only at '
                'the next nova-compute restart: unbounded)',
                '%.1f ms median, %s ms worst' % (median, row[0][4]),
                '~%.0fx sooner than the average periodic pick-up'
                % (30000.0 / median),
                '%s, umockdev, Placement 16 (wsgiref, SQLite)'
                % machine_base()))
    reprogram = _read(os.path.join(res, 'reprogram.md'))
    if reprogram:
        over = _md_rows(reprogram, 'orchestration overhead')
        whole = _md_rows(reprogram, 'whole reprogramming')
        serial = _md_rows(reprogram, 'one at a time')
        par = _md_rows(reprogram, 'all at once')
        requests = re.search(r'Placement requests per reprogramming: '
                             r'([\d/]+)', reprogram)
        concurrency = re.search(r'^## Concurrency: (\d+) FPGAs of one host, '
                                r'each load taking (\S+) s', reprogram, re.M)
        if over and whole:
            rows.append((
                'FPGA reprogramming: orchestration overhead',
                'cyborg-nova\'s steps around the bitstream load (validate, '
                'fence, prove unallocated, verify, swap traits, unfence: '
                '%s Placement requests) vs the whole reprogramming; no '
                'peer measured (Nova cannot reprogram, upstream Cyborg\'s '
                'program API was not run here)'
                % (requests.group(1) if requests else 'n/a'),
                'overhead median %s ms (worst %s) of %s ms' % (
                    over[0][1], over[0][3], whole[0][1]),
                'overhead = %.0f%% of a reprogramming with a %s ms load'
                % (100 * float(over[0][1]) / float(whole[0][1]),
                   '%.0f' % (float(whole[0][1]) - float(over[0][1]))),
                '%s, Placement 16 (wsgiref, SQLite)' % machine_base()))
        if serial and par and concurrency:
            rows.append((
                'FPGA reprogramming: %s FPGAs of one host, %s s loads'
                % concurrency.groups(),
                'all at once (program_concurrency) vs one at a time',
                '%s s vs %s s' % (par[0][1], serial[0][1]),
                '%.1fx faster' % (float(serial[0][1]) / float(par[0][1])),
                '%s, Placement 16 (wsgiref, SQLite)' % machine_base()))
    scale_data = _read(os.path.join(res, 'scale.json'))
    if scale_data:
        mach = scale_data['machine']
        base = '%d cores, Python %s, Placement %s' % (
            mach['cores'], mach['python'], mach['placement'])
        regs = scale_data.get('registration', [])
        by = {(r['backend'], r['hosts'], bool(r.get('durable'))): r
              for r in regs}
        for r in regs:
            db = ('SQLite, gunicorn 1 worker' if r['backend'] == 'sqlite'
                  else 'PostgreSQL %s, gunicorn %d workers'
                  % (mach.get('postgresql', '').split()[0], r['workers']))
            db += (', durable commits' if r.get('durable') else
                   ', commits not flushed to disk')
            other = by.get(('sqlite' if r['backend'] == 'postgresql'
                            else 'postgresql', r['hosts'],
                            bool(r.get('durable'))))
            ratio = ''
            if other and r['backend'] == 'postgresql':
                ratio = 'SQLite takes %.1fx as long' % (other['wall_s']
                                                        / r['wall_s'])
            rows.append((
                'Scale: register {:,} computes x 10 accelerators'.format(
                    r['hosts']),
                'HTTP API as nova-compute does it (Nova\'s report client), '
                '%d hosts in flight; %s%s' % (
                    scale_data['args']['clients']
                    * scale_data['args']['threads'], db,
                    '; the first {:,} hosts of the {:,}-host run'.format(
                        r['hosts'], r['milestone_of'])
                    if r.get('milestone_of') else ''),
                '%.0f s, {:,} requests (%.0f/host), %.0f req/s, %d '
                'errors'.format(r['requests']) % (
                    r['wall_s'], r['requests_per_host'], r['req_per_s'],
                    sum(n for s, n in r['status'].items() if int(s) >= 400)),
                ratio or '-', '%s, %s' % (base, db)))
        for r in scale_data.get('registration_stopped') or []:
            sqlite = by.get(('sqlite', r['hosts_planned'], False))
            rows.append((
                'Scale: register {:,} computes x 10 accelerators '
                '(NOT FINISHED)'.format(r['hosts_planned']),
                'as above; PostgreSQL %s, gunicorn %d workers, stopped '
                'before the end' % (mach.get('postgresql', '').split()[0],
                                    r['workers']),
                'stopped after %.0f s: {:,} requests (about %.0f hosts\' '
                'worth), %.1f req/s, %d errors'.format(r['requests'])
                % (r['stopped_after_s'], r['hosts_worth'], r['req_per_s'],
                   r['errors']),
                'throughput %.1fx SQLite\'s (%.1f req/s over its whole run)'
                % (r['req_per_s'] / sqlite['req_per_s'], sqlite['req_per_s'])
                if sqlite else '-',
                base + ', PostgreSQL, gunicorn %d workers' % r['workers']))
        for hosts, settings in (scale_data.get('candidates') or {}).items():
            for setting, shapes in settings.items():
                parts, ratios, lower = [], [], []
                for flavor in scale_data['queries']:
                    pf = shapes['per-PF'][flavor]
                    vf = shapes['per-VF'][flavor]
                    if 'median_ms' in pf and 'median_ms' in vf:
                        r = vf['median_ms'] / pf['median_ms']
                        ratios.append(r)
                        parts.append('%s: %.0f / %.0f ms (p95 %.0f / %.0f) '
                                     '= %.1fx' % (
                                         flavor, pf['median_ms'],
                                         vf['median_ms'], pf['p95_ms'],
                                         vf['p95_ms'], r))
                    elif 'median_ms' in pf and (vf.get('timed_out')
                                                or vf.get('skipped')):
                        # No answer within the client timeout: a lower
                        # bound.
                        timeout = 1000.0 * scale_data['args']['timeout']
                        r = timeout / pf['median_ms']
                        lower.append(r)
                        parts.append('%s: %.0f / > %.0f ms (p95 %.0f / '
                                     'timeout) = > %.1fx' % (
                                         flavor, pf['median_ms'], timeout,
                                         pf['p95_ms'], r))
                    else:
                        parts.append('%s: n/a' % flavor)
                span = ''
                if ratios:
                    span = 'per-VF **%.1fx-%.1fx** slower%s' % (
                        min(ratios), max(ratios), ' (and %s where per-VF '
                        'timed out)' % ', '.join('> %.1fx' % r
                                                 for r in lower)
                        if lower else '')
                elif lower:
                    span = ('per-VF **more than %.1fx-%.1fx** slower (no '
                            'per-VF answer within the %.0f s timeout: '
                            'lower bounds)' % (
                                min(lower), max(lower),
                                scale_data['args']['timeout']))
                rows.append((
                    'Scale: GET /allocation_candidates at {:,} hosts, '
                    'wide-tree setting %s'.format(int(hosts)) % setting,
                    'one provider per PF (cyborg-nova) vs one per VF '
                    '(upstream Cyborg\'s NIC/QAT shape); median ms per-PF / '
                    'per-VF',
                    '; '.join(parts), span or 'n/a',
                    '%s, PostgreSQL %s, bulk-filled' % (
                        base, mach.get('postgresql', '').split()[0])))
    churn = _read(os.path.join(res, 'churn.json'))
    if churn and churn.get('models'):
        ms = churn['models']
        mach = churn['machine']
        rows.append((
            'Convergence under churn: {:,} computes, %g%% of devices '
            'changing a minute'.format(churn['args']['hosts'])
            % churn['args']['churn'],
            ' vs '.join(m['model'] for m in ms) + ': requests a minute at '
            'Placement (measured on %s sampled hosts for %.0f s, '
            'extrapolated)' % (
                ' / '.join(str(m['sampled_hosts']) for m in ms),
                churn['args']['duration']),
            ' vs '.join('{:,.0f}'.format(m['requests_per_min_1000'])
                        for m in ms),
            'upstream shape **%.1fx** (lower bound)' % (
                ms[1]['requests_per_min_1000']
                / ms[0]['requests_per_min_1000'])
            if len(ms) > 1 else '-',
            '%d cores, Python %s, Placement %s, PostgreSQL %s, gunicorn '
            '%d workers' % (mach['cores'], mach['python'],
                            mach['placement'],
                            mach.get('postgresql', '').split()[0],
                            churn['args']['pg_workers'])))
    cli = _read(os.path.join(res, 'cli-start.json'))
    if cli:
        peer = cli['samples'].get(cli['peer'])
        for name in cli['nova_free']:
            ours = statistics.median(cli['samples'][name])
            rows.append((
                'CLI start: `%s`' % name,
                'wall time of a fresh process vs the openstack CLI\'s `%s` '
                '(same venv), median of %d; Nova modules it imports'
                % (cli['peer'], cli['runs']),
                '%.0f ms vs %s; %d nova modules' % (
                    ours, '%.0f ms' % statistics.median(peer) if peer
                    else 'n/a', cli['imports'][name]['nova_modules']),
                '%.2fx the time of openstack' % (
                    ours / statistics.median(peer)) if peer else '-',
                '%s; %s' % (cli['machine'], cli['versions'])))
    rows += _nova_pci_rows(res)
    return rows


def _nova_pci_rows(res: str) -> list[tuple]:
    """The spawn path and update cycle against Nova's PCI passthrough."""
    rows = []
    spawn = _read(os.path.join(res, 'spawn-path.json'))
    for host in (spawn or {}).get('hosts', []):
        ours, nova = host['summary']['cyborg-nova'], \
            host['summary']['nova-pci']
        size = '{:,}'.format(host['functions'])
        rows.append((
            'Spawn path, %s PCI functions: POST /servers to ACTIVE, 2 VFs'
            % size,
            'cyborg-nova (`resources:CUSTOM_QAT=2`) vs Nova\'s own PCI '
            'passthrough of the same VFs (`pci_passthrough:alias`, PCI in '
            'Placement), same host, real LibvirtDriver on fakelibvirt; '
            'median (min-max) of %d builds each, interleaved'
            % ours['runs'],
            '%.0f ms (%.0f-%.0f) vs %.0f ms (%.0f-%.0f)' % (
                ours['wall_ms'], ours['wall_min_ms'], ours['wall_max_ms'],
                nova['wall_ms'], nova['wall_min_ms'], nova['wall_max_ms']),
            '**%.2fx** Nova\'s time' % (ours['wall_ms'] / nova['wall_ms']),
            spawn['machine']))
        rows.append((
            'Spawn path, %s PCI functions: CPU inside the driver\'s spawn'
            % size,
            'thread CPU of `spawn` with cyborg-nova (its hooks alone, less '
            'the Nova code they wrap; and the whole spawn) vs Nova\'s '
            '`spawn` with PCI passthrough; Placement\'s serving apart; '
            'medians',
            'cyborg-nova\'s hooks %.1f ms (+ %.1f ms Placement, %d '
            'request); whole spawn %.1f ms vs %.1f ms' % (
                ours['spawn_project_ms'], ours['spawn_placement_ms'],
                ours['spawn_requests'], ours['spawn_cpu_ms'],
                nova['spawn_cpu_ms']),
            '%.2fx Nova\'s spawn CPU' % (ours['spawn_cpu_ms']
                                         / nova['spawn_cpu_ms']),
            spawn['machine']))
    cycle = _read(os.path.join(res, 'update-cycle.json'))
    for host in (cycle or {}).get('hosts', []):
        ours, nova = host['summary']['cyborg-nova'], \
            host['summary']['nova-pci']
        rows.append((
            'Update cycle, {:,} PCI functions: CPU of one '
            'update_available_resource'.format(host['functions']),
            'cyborg-nova vs Nova\'s PCI tracker (PCI in Placement) '
            'reporting the same units as the same %d providers; steady '
            'state, median of %d cycles each, interleaved; compute CPU = '
            'all but Placement\'s serving' % (nova['children'],
                                              ours['cycles']),
            '%.0f ms vs %.0f ms compute CPU (the reporter\'s own code %.0f '
            'vs %.0f ms); Placement: %.0f vs %.0f requests, %.0f vs %.0f '
            'ms' % (ours['compute_ms'], nova['compute_ms'],
                    ours['reporter_ms'], nova['reporter_ms'],
                    ours['requests'], nova['requests'],
                    ours['placement_ms'], nova['placement_ms']),
            'compute CPU **%.2fx** Nova\'s; Placement requests %.2fx' % (
                ours['compute_ms'] / nova['compute_ms'],
                ours['requests'] / max(nova['requests'], 1)),
            cycle['machine']))
    return rows


def write_results_md(out: str, res: str, done: dict, mode: str,
                     total: float, results_md: str) -> None:
    rows = summary_rows(res, done)
    lines = [
        '# cyborg-nova benchmark results',
        '',
        'Generated by `python benchmarks/run_all.py%s` in %.0f min on %s. '
        'Every row is measured on this machine unless it says ESTIMATE or '
        'extrapolated; the details of each benchmark follow the table, '
        'and `%s` holds each benchmark\'s own file.'
        % (mode_flag(mode), total / 60.0, machine_base(),
           os.path.relpath(res, REPO_ROOT)),
        '',
        '| benchmark | what was compared | result | ratio | machine |',
        '|---|---|---|---|---|',
    ]
    for row in rows:
        lines.append('| %s |' % ' | '.join(c.replace('|', '/') for c in row))
    failed = [n for n, d in done.items() if d['returncode']]
    lines += ['', 'Steps (time; share of the machine\'s CPU other users\' '
              'processes took meanwhile, which slows what is measured): '
              '%s.' % ', '.join(
                  '%s %.0f s%s%s%s' % (
                      n, d['seconds'],
                      '; %.0f%%' % (100 * d['other_cpu_share'])
                      if 'other_cpu_share' in d else '',
                      ' (**FAILED**)' if d['returncode'] else '',
                      ' (%s)' % d['note'] if d.get('note') else '')
                  for n, d in done.items())]
    if failed:
        lines += ['', '**Failed steps** (their rows are missing or from an '
                  'earlier run): %s. See `%s`.' % (
                      ', '.join(failed), os.path.relpath(
                          _log_dir(out), REPO_ROOT))]
    pngs = sorted(p for p in os.listdir(res) if p.endswith('.png'))
    if pngs:
        lines += ['', 'Plots: ' + ', '.join(
            '[%s](%s)' % (p, os.path.relpath(os.path.join(res, p),
                                             os.path.dirname(results_md)))
            for p in pngs) + '.']
    for name in ('discovery.md', 'placement-traffic.md', 'fence-latency.md',
                 'reprogram.md', 'scale.md', 'churn.md', 'cli-start.md',
                 'spawn-path.md', 'update-cycle.md'):
        text = _read(os.path.join(res, name))
        if text:
            lines += ['', '---', '']
            for line in text.strip().splitlines():
                # One level down, under this file's title.
                lines.append('#' + line if line.startswith('#') else line)
    with open(results_md, 'w') as f:
        f.write('\n'.join(lines) + '\n')


# -- tables for the docs ------------------------------------------------------

#: (include file, result file, heading the table follows ('' = the first
#: table of the file), which table under it (0 = the first)).
DOC_TABLES = [
    ('discovery-times.inc', 'discovery.md', '', 0),
    ('discovery-found.inc', 'discovery.md', '## What each found', 0),
    ('discovery-memory.inc', 'discovery.md', '## Peak memory', 0),
    ('traffic.inc', 'placement-traffic.md', '## Requests per phase', 0),
    ('registration.inc', 'scale.md', '## Registration', 0),
    ('candidates.inc', 'scale.md', '## Allocation candidates', 0),
    ('fence.inc', 'fence-latency.md', '', 0),
    ('fence-anchors.inc', 'fence-latency.md', '## Anchors', 0),
    ('reprogram.inc', 'reprogram.md', '', 0),
    ('reprogram-concurrency.inc', 'reprogram.md', '## Concurrency', 0),
    ('churn.inc', 'churn.md', '', 0),
    ('cli-start.inc', 'cli-start.md', '', 0),
    ('cli-start-imports.inc', 'cli-start.md', '## Imports', 0),
    ('spawn-path.inc', 'spawn-path.md', '## Results', 0),
    ('spawn-path-cpu.inc', 'spawn-path.md', '## Results', 1),
    ('update-cycle.inc', 'update-cycle.md', '## Results', 0),
]


def md_tables(text: str, heading: str = '') -> list[list[list[str]]]:
    """The Markdown tables after ``heading`` (up to the next heading)."""
    lines = (text or '').splitlines()
    if heading:
        for i, line in enumerate(lines):
            if line.startswith(heading):
                lines = lines[i + 1:]
                break
        else:
            return []
    tables, current = [], None
    for line in lines:
        if heading and line.startswith('#'):
            break
        if line.startswith('|'):
            cells = [c.strip() for c in line.strip().strip('|').split('|')]
            if all(set(c) <= set('-:') and c for c in cells):
                continue  # the separator row
            if current is None:
                current = []
                tables.append(current)
            current.append(cells)
        else:
            current = None
    return tables


def rst_cell(text: str) -> str:
    """A Markdown table cell as reStructuredText inline text."""
    text = re.sub(r'(?<!`)`([^`]+)`(?!`)', r'``\1``', text)
    if text in ('-', '+', '*'):
        return '\\' + text
    return text


def rst_table(rows: list[list[str]]) -> str:
    width = max(len(r) for r in rows)
    out = ['.. list-table::', '   :header-rows: 1', '']
    for row in rows:
        row = row + [''] * (width - len(row))
        for i, cell in enumerate(row):
            out.append(('   * - ' if i == 0 else '     - ')
                       + rst_cell(cell))
    return '\n'.join(line.rstrip() for line in out) + '\n'


def write_doc_tables(res: str, dest: str, done: dict, mode: str,
                     total: float) -> list[str]:
    """reST tables of the recorded results for performance.rst."""
    os.makedirs(dest, exist_ok=True)
    written = []
    for name, source, heading, index in DOC_TABLES:
        tables = md_tables(_read(os.path.join(res, source)), heading)
        text = rst_table(tables[index]) if len(tables) > index else \
            '*Not in this run.*\n'
        with open(os.path.join(dest, name), 'w') as f:
            f.write(text)
        written.append(name)
    rows = [['Benchmark', 'What was compared', 'Result', 'Ratio',
             'Machine']] + [list(r) for r in summary_rows(res, done)]
    with open(os.path.join(dest, 'summary.inc'), 'w') as f:
        f.write('Recorded with ``python benchmarks/run_all.py%s``: %.0f '
                'minutes on %s.' % (mode_flag(mode),
                                    total / 60.0, machine_base()))
        steps = [(n, d) for n, d in done.items() if 'other_cpu_share' in d]
        if steps:
            f.write(' The steps, with the share of the machine\'s CPU that '
                    'other users\' processes took meanwhile: %s.' % ', '.join(
                        '%s %.0f s (%.0f%%)' % (n, d['seconds'],
                                                100 * d['other_cpu_share'])
                        for n, d in steps))
        f.write('\n\n' + rst_table(rows))
    written.append('summary.inc')
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument('--quick', dest='mode', action='store_const',
                       const='quick', default='full',
                       help='smaller sizes, every comparison kept (~12 min); '
                            'written to benchmarks/.work/quick/')
    sizes.add_argument('--smoke', dest='mode', action='store_const',
                       const='smoke',
                       help='the smallest sizes that still run every step '
                            'and comparison (a few minutes), to check a '
                            'machine before a long run; written to '
                            'benchmarks/.work/smoke/')
    parser.add_argument('--only', default='',
                        help='comma-separated steps to run (the others\' '
                             'last results are reused): %s'
                             % ', '.join(SCRIPTS))
    parser.add_argument('--report-only', action='store_true',
                        help='rebuild results.md and plots, run nothing')
    parser.add_argument('--out', default=None,
                        help='where results.md and results/ go (default: '
                             'benchmarks/ for the full run, '
                             'benchmarks/.work/<mode>/ otherwise)')
    args = parser.parse_args(argv)
    only = {s for s in args.only.split(',') if s} or None
    if only and only - set(SCRIPTS):
        parser.error('unknown step(s) %s; the steps are: %s' % (
            ', '.join(sorted(only - set(SCRIPTS))), ', '.join(SCRIPTS)))
    mode = args.mode
    out = args.out or (HERE if mode == 'full' else
                       os.path.join(HERE, '.work', mode))
    res = os.path.join(out, 'results')
    os.makedirs(res, exist_ok=True)
    start = time.perf_counter()
    done_path = os.path.join(res, 'steps.json')
    done = _read(done_path) or {}
    if args.report_only:
        subprocess.run([sys.executable, os.path.join(HERE, 'plots.py'),
                        '--results', res], cwd=REPO_ROOT, check=False)
    else:
        done.update(run_steps(out, mode, only))
        with open(done_path, 'w') as f:
            json.dump(done, f, indent=1)
    total = sum(d['seconds'] for d in done.values()) if (
        only or args.report_only) else time.perf_counter() - start
    results_md = os.path.join(out, 'results.md')
    write_results_md(out, res, done, mode, total, results_md)
    if mode == 'full' and args.out is None:
        os.makedirs(DOC_IMAGES, exist_ok=True)
        for png in os.listdir(res):
            if png.endswith('.png'):
                shutil.copy(os.path.join(res, png), DOC_IMAGES)
        write_doc_tables(res, DOC_IMAGES, done, mode, total)
    print('wrote %s (%.0f min)' % (os.path.relpath(results_md, REPO_ROOT),
                                   total / 60.0))
    return 1 if any(d.get('returncode') for d in done.values()) else 0


if __name__ == '__main__':
    sys.exit(main())
