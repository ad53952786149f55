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

"""Convergence under churn: Placement requests a minute at 1,000 computes.

1,000 computes (the hosts of ``benchmarks/scale.py``: 10 accelerators
each) are in a real Placement (openstack-placement 16 under gunicorn on
PostgreSQL 15, filled in bulk as in scale.py), and 1% of the devices
change state each minute. Two models, each measured for a window of real
time on a sample of the hosts, then extrapolated to 1,000 hosts:

- ``cyborg-nova`` (providers per PF, with the agent): each sampled host
  runs nova-compute's periodic ``_update_to_placement`` once a minute
  (Nova 34's report client, cyborg-nova's ProviderTreeUpdater, retried on
  generation conflicts as Nova does), its association refresh every
  300 s (staggered: a fifth of the hosts a minute); when one of its
  devices changes state (ready <-> unhealthy, in its state store) the
  agent's ``Fencer`` writes ``reserved`` at once (one GET and one PUT),
  and the host's next update converges on it.
- ``upstream Cyborg shape`` (one provider per NIC/QAT VF): the same
  periodic update of the same hosts, whose trees hold the per-VF
  providers; device changes are NOT modelled for it (Cyborg's agent and
  conductor have no such fence: their own polling and writes are not
  counted), so its figure is a lower bound.

Requests are counted at the server (gunicorn's access log), over the
whole window, divided by its minutes, and multiplied by 1,000 / sampled
hosts: that extrapolation assumes the cost grows linearly with hosts
(each host's requests touch only its own tree). Placement's CPU seconds
(gunicorn master and workers, not PostgreSQL) are extrapolated the same
way.

Writes ``benchmarks/results/churn.md`` and ``churn.json``.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import heapq
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

os.environ.setdefault('OS_NOVA_DISABLE_EVENTLET_PATCHING', '1')

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO_ROOT)

import scale  # noqa: E402

PERIOD_S = 60.0       # [DEFAULT] update_resources_interval (periodic)
REFRESH_S = 300.0     # [compute] resource_provider_association_refresh
CYBORG_NOVA, UPSTREAM = 'cyborg-nova (per-PF, agent fences)', \
    'upstream Cyborg shape (per-VF)'


# -- the worker: a slice of the sampled hosts, in real time ------------------

def worker(args) -> int:
    import logging

    from keystoneauth1 import adapter
    from keystoneauth1 import session
    from keystoneauth1 import token_endpoint
    from nova import context

    from cyborg_nova import fencing
    from cyborg_nova import providers
    from cyborg_nova import store as state_store

    logging.disable(logging.WARNING)
    job = json.load(open(args.job))
    spec = json.load(open(job['spec']))
    ctx = context.get_admin_context()
    hosts = job['hosts']
    per_pf = job['shape'] == scale.PER_PF
    lock = threading.Lock()
    stats = collections.Counter()
    cycle_s, fence_s, lag_s, errors = [], [], [], []
    clients, updaters, accels = {}, {}, {}
    store_path = os.path.join(job['workdir'], 'state-%d.sqlite'
                              % os.getpid())
    sess = session.Session(auth=token_endpoint.Token(job['placement'],
                                                     'admin'))
    fencer = fencing.Fencer(adapter.Adapter(sess, service_type='placement'))

    def untouched(tree, node):
        """Nova's own driver: the per-VF children are left as they are."""

    for h in hosts:
        clients[h] = scale.report_client(job['placement'])
        if per_pf:
            updaters[h] = scale.make_updater(spec['sysfs_root'],
                                             spec['nics'], store_path)
    if per_pf:
        found = updaters[hosts[0]].discoverer.discover().accelerators
        accels = {a.address: a for a in found}

    def cycle(h, refresh):
        node = scale.nodename(h)
        client = clients[h]
        if refresh:
            client._association_refresh_time.clear()
        start = time.perf_counter()
        try:
            conflicts = scale.update_to_placement(
                client, ctx, node,
                updaters[h].update if per_pf else untouched)
        except Exception as exc:  # noqa: BLE001 - counted
            with lock:
                stats['cycle_errors'] += 1
                errors.append(str(exc)[:300])
            return
        with lock:
            stats['cycles'] += 1
            stats['refresh_cycles'] += refresh
            stats['conflicts'] += conflicts
            cycle_s.append(time.perf_counter() - start)

    def change(h, address):
        node = scale.nodename(h)
        store = updaters[h].store
        now = store.devices(node)[address].state
        new = (state_store.UNHEALTHY if now == state_store.READY
               else state_store.READY)
        store.set_state(node, address, new)
        start = time.perf_counter()
        result = fencer.apply(address, providers.provider_uuid(node, address),
                              new, accels[address])
        with lock:
            stats['changes'] += 1
            stats['fence_' + result.outcome] += 1
            fence_s.append(time.perf_counter() - start)

    # Warm-up: each host's first update (a new nova-compute: it reads its
    # whole tree). Not in the window.
    with concurrent.futures.ThreadPoolExecutor(args.threads) as pool:
        list(pool.map(lambda h: cycle(h, False), hosts))
    warm = dict(stats)
    stats.clear()
    cycle_s.clear()
    print(json.dumps({'warm': warm, 'errors': errors[:5]}), flush=True)
    errors.clear()
    # The coordinator names the start time once every worker is warm.
    while not os.path.exists(job['start_file']):
        time.sleep(0.05)
    time.sleep(0.05)
    with open(job['start_file']) as f:
        t0 = float(f.read())
    time.sleep(max(0.0, t0 - time.time()))
    events = []
    rnd = random.Random(job['seed'])
    for h in hosts:
        offset = rnd.uniform(0, PERIOD_S)
        k = 0
        while offset + k * PERIOD_S < job['duration']:
            minute = k
            refresh = (h + minute) % int(REFRESH_S / PERIOD_S) == 0
            heapq.heappush(events, (t0 + offset + k * PERIOD_S, 'cycle', h,
                                    refresh))
            k += 1
    for at, h, address in job['changes']:
        heapq.heappush(events, (t0 + at, 'change', h, address))
    pool = concurrent.futures.ThreadPoolExecutor(args.threads)
    futures = []
    while events:
        at, kind, h, arg = heapq.heappop(events)
        delay = at - time.time()
        if delay > 0:
            time.sleep(delay)
        lag_s.append(max(0.0, -delay))
        if kind == 'cycle':
            futures.append(pool.submit(cycle, h, arg))
        else:
            futures.append(pool.submit(change, h, arg))
    concurrent.futures.wait(futures)
    pool.shutdown()
    print(json.dumps({'stats': dict(stats), 'cycle_s': cycle_s,
                      'errors': errors[:5],
                      'fence_s': fence_s, 'lag_s': lag_s}), flush=True)
    return 0


# -- the coordinator ----------------------------------------------------------

def run_model(name, shape, server, spec, spec_path, sample, args,
              workdir, rnd) -> dict:
    hosts = list(range(sample))
    devices = [c['address'] for c in spec['children']]
    changes = []
    if shape == scale.PER_PF:
        # 1% of the sampled hosts' devices a minute, at random times.
        count = round(sample * len(devices) * args.churn / 100.0
                      * args.duration / PERIOD_S)
        for _ in range(count):
            changes.append((rnd.uniform(0, args.duration),
                            rnd.choice(hosts), rnd.choice(devices)))
    procs, jobs = [], []
    slices = [hosts[i::args.workers] for i in range(args.workers)]
    for i, mine in enumerate(slices):
        job = {'spec': spec_path, 'placement': server.url, 'shape': shape,
               'hosts': mine, 'workdir': workdir, 'duration': args.duration,
               'seed': args.seed + i,
               'changes': [c for c in changes if c[1] in set(mine)]}
        jobs.append(job)
    # Each worker warms its hosts up, then waits for the start file.
    sync_path = os.path.join(workdir, 'start-%s' % shape)
    for i, job in enumerate(jobs):
        path = os.path.join(workdir, 'job-%s-%d.json' % (shape, i))
        job['start_file'] = sync_path
        with open(path, 'w') as f:
            json.dump(job, f)
        procs.append(subprocess.Popen(
            [sys.executable, __file__, '_worker', '--job', path,
             '--threads', str(args.threads)],
            stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT))
    warm = collections.Counter()
    errors = []
    mark0 = server.mark()
    for p in procs:
        line = p.stdout.readline()
        if not line:
            raise RuntimeError('churn worker died during warm-up')
        w = json.loads(line)
        warm.update({k: v for k, v in w['warm'].items()
                     if isinstance(v, int)})
        errors += w['errors']
    warm_requests = len(server.requests_since(mark0))
    # All warm: start the window now.
    start_at = time.time() + 1.0
    with open(sync_path + '.tmp', 'w') as f:
        f.write(repr(start_at))
    os.rename(sync_path + '.tmp', sync_path)
    mark = server.mark()
    cpu0 = server.cpu_seconds()
    outs = []
    for p in procs:
        out, _ = p.communicate()
        if p.returncode:
            raise RuntimeError('churn worker failed')
        outs.append(json.loads(out.strip().splitlines()[-1]))
    window = time.time() - start_at
    cpu = server.cpu_seconds() - cpu0
    served = server.requests_since(mark)
    stats = collections.Counter()
    cycle_s, fence_s, lag_s = [], [], []
    for o in outs:
        stats.update({k: v for k, v in o['stats'].items()
                      if isinstance(v, int)})
        cycle_s += o['cycle_s']
        fence_s += o['fence_s']
        lag_s += o['lag_s']
        errors += o['errors']
    minutes = args.duration / PERIOD_S
    kinds = collections.Counter(scale.request_kind(m, p)
                                for m, p, _, _ in served)
    scale_up = args.hosts / float(sample)
    return {
        'model': name, 'shape': shape, 'sampled_hosts': sample,
        'children': len(scale.shape_children(spec, shape)),
        'window_s': window, 'duration_s': args.duration,
        'warm_requests': warm_requests, 'warm': dict(warm),
        'requests': len(served),
        'requests_per_min': len(served) / minutes,
        'requests_per_min_1000': len(served) / minutes * scale_up,
        'writes': sum(1 for m, _, _, _ in served if m != 'GET'),
        'status': dict(collections.Counter(str(s) for _, _, s, _ in served)),
        'kinds_per_min': {k: v / minutes for k, v in kinds.items()},
        'cpu_s_per_min': cpu / minutes,
        'cpu_s_per_min_1000': cpu / minutes * scale_up,
        'stats': dict(stats),
        'cycle_median_ms': 1000 * statistics.median(cycle_s)
        if cycle_s else None,
        'fence_median_ms': 1000 * statistics.median(fence_s)
        if fence_s else None,
        'fence_p95_ms': 1000 * scale.percentile(fence_s, 95)
        if fence_s else None,
        'max_lag_s': max(lag_s) if lag_s else 0.0,
        'changes_planned': len(changes), 'errors': errors[:5],
    }


def run(args) -> dict:
    workdir = tempfile.mkdtemp(prefix='cyborg-nova-churn-')
    os.chmod(workdir, 0o755)
    rnd = random.Random(args.seed)
    result = {'machine': scale.machine(), 'args': vars(args).copy(),
              'models': []}
    pg = None
    servers = []
    try:
        scale.log('churn: host spec')
        spec = scale.host_spec(workdir)
        spec_path = os.path.join(workdir, 'spec.json')
        with open(spec_path, 'w') as f:
            json.dump(spec, f)
        pg = scale.Postgres(workdir)
        pg.start()
        result['machine']['postgresql'] = pg.version()
        for name, shape, sample in (
                (CYBORG_NOVA, scale.PER_PF, args.sample),
                (UPSTREAM, scale.PER_VF, args.sample_vf)):
            db = 'churn_%s' % shape.replace('-', '').lower()
            url = pg.create_db(db)
            server = scale.Placement(workdir, db, url, args.pg_workers)
            servers.append(server)
            server.sync()
            server.start()
            server.ensure_custom(spec)
            scale.log('churn: bulk fill %d hosts, %s' % (args.hosts, shape))
            fill = scale.run_bulk_fill(url, spec_path, shape, 0, args.hosts)
            scale.log('churn: %s, %d of %d hosts sampled, %.0f s window'
                      % (name, sample, args.hosts, args.duration))
            r = run_model(name, shape, server, spec, spec_path, sample,
                          args, workdir, rnd)
            r['fill'] = fill
            scale.log('  %d requests in the window (%.0f a minute), %s'
                      % (r['requests'], r['requests_per_min'], r['stats']))
            result['models'].append(r)
            server.stop()
    finally:
        for server in servers:
            server.stop()
        if pg is not None:
            pg.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def report(result: dict, seconds: float) -> str:
    args = result['args']
    models = result['models']
    lines = [
        '# Convergence under churn: requests a minute at Placement',
        '',
        'Generated by `benchmarks/churn.py` in %.0f s. Machine: %s.'
        % (seconds, scale.machine_line(result['machine'])),
        '',
        '{:,} computes (10 accelerators each, as in scale.md) in one '
        'Placement (gunicorn, %d workers, PostgreSQL), filled in bulk; %g%% '
        'of the devices change state (ready <-> unhealthy) each minute. '
        'MEASURED on a sample of the hosts for a %.0f s window of real '
        'time, each sampled host running nova-compute\'s periodic update '
        'every %.0f s (association refresh every %.0f s, staggered) with '
        'Nova 34\'s report client; requests counted at the server. '
        'EXTRAPOLATED to {:,} hosts by multiplying by hosts / sampled '
        'hosts (each host\'s requests touch only its own tree).'
        .format(args['hosts'], args['hosts']) % (
            args['pg_workers'], args['churn'], args['duration'], PERIOD_S,
            REFRESH_S),
        '',
        '| model | child providers a host | sampled hosts | requests in '
        'the window (measured) | a minute, sampled hosts | **a minute at '
        '{:,} hosts (extrapolated)** | writes in the window | 4xx/5xx | '
        'Placement CPU s a minute at {:,} hosts (extrapolated) |'.format(
            args['hosts'], args['hosts']),
        '|---|---:|---:|---:|---:|---:|---:|---:|---:|',
    ]
    for m in models:
        errors = sum(n for s, n in m['status'].items() if int(s) >= 400)
        lines.append('| %s | %d | %d | {:,} | {:,.0f} | **{:,.0f}** | %d | '
                     '%d | %.0f |'.format(m['requests'],
                                          m['requests_per_min'],
                                          m['requests_per_min_1000'])
                     % (m['model'], m['children'], m['sampled_hosts'],
                        m['writes'], errors, m['cpu_s_per_min_1000']))
    if len(models) == 2 and models[0]['requests_per_min_1000']:
        lines += ['', 'Upstream Cyborg\'s shape / cyborg-nova, requests a '
                  'minute at {:,} hosts: **%.1fx** (a lower bound: '
                  'Cyborg\'s own agent and conductor traffic is not '
                  'counted).'.format(args['hosts']) % (
                      models[1]['requests_per_min_1000']
                      / models[0]['requests_per_min_1000'])]
    pf = models[0]
    st = pf['stats']
    lines += [
        '',
        '## What happened in the window (cyborg-nova)',
        '',
        '- Device changes: %d (planned %d): fences written %d, unchanged '
        '%d, failed %d; fence median %.1f ms, p95 %.1f ms (GET + PUT, '
        'while the periodic updates ran).' % (
            st.get('changes', 0), pf['changes_planned'],
            st.get('fence_written', 0), st.get('fence_unchanged', 0),
            st.get('fence_failed', 0), pf['fence_median_ms'] or 0,
            pf['fence_p95_ms'] or 0),
        '- Periodic updates: %d (%d with the association refresh), '
        'generation conflicts met by them and retried (Nova\'s cache was '
        'older than the agent\'s write): %d; update median %.0f ms; '
        'largest scheduling lag %.1f s.' % (
            st.get('cycles', 0), st.get('refresh_cycles', 0),
            st.get('conflicts', 0), pf['cycle_median_ms'] or 0,
            pf['max_lag_s']),
        '',
        '## Requests a minute by kind (measured, sampled hosts)',
        '',
        '| request | %s |' % ' | '.join(m['model'] for m in models),
        '|---|%s' % ('---:|' * len(models)),
    ]
    kinds = sorted({k for m in models for k in m['kinds_per_min']},
                   key=lambda k: -max(m['kinds_per_min'].get(k, 0)
                                      for m in models))
    for k in kinds:
        lines.append('| `%s` | %s |' % (k, ' | '.join(
            '%.1f' % m['kinds_per_min'].get(k, 0) for m in models)))
    lines += [
        '',
        'Before each window every sampled host ran one update to fill '
        'its report client\'s cache (a new nova-compute reads its whole '
        'tree): %s requests, not counted above.' % ', '.join(
            '%s {:,}'.format(m['warm_requests']) % m['model']
            for m in models),
        '',
    ]
    return '\n'.join(lines)


def main(argv=None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == '_worker':
        p = argparse.ArgumentParser()
        p.add_argument('--job', required=True)
        p.add_argument('--threads', type=int, default=8)
        return worker(p.parse_args(argv[1:]))
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--quick', action='store_true',
                        help='20 + 10 sampled hosts, a 60 s window')
    parser.add_argument('--hosts', type=int, default=1000)
    parser.add_argument('--sample', type=int, default=None,
                        help='cyborg-nova hosts run for real (default 100)')
    parser.add_argument('--sample-vf', type=int, default=None,
                        help='per-VF hosts run for real (default 15)')
    parser.add_argument('--duration', type=float, default=None,
                        help='window in seconds (default 120)')
    parser.add_argument('--churn', type=float, default=1.0,
                        help='%% of devices changing a minute (default 1)')
    parser.add_argument('--pg-workers', type=int, default=4)
    parser.add_argument('--workers', type=int, default=2,
                        help='client processes (default 2)')
    parser.add_argument('--threads', type=int, default=8)
    parser.add_argument('--seed', type=int, default=1)
    parser.add_argument('--output', default=os.path.join(
        HERE, 'results', 'churn.md'))
    args = parser.parse_args(argv)
    if args.sample is None:
        args.sample = 20 if args.quick else 100
    if args.sample_vf is None:
        args.sample_vf = 10 if args.quick else 15
    if args.duration is None:
        args.duration = 60.0 if args.quick else 120.0
    return scale.run_and_write(run, report, args)


if __name__ == '__main__':
    sys.exit(main())
