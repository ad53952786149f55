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

"""Discovery cost on hosts of 100, 600 and 2,000 PCI functions, with peers.

For each size, builds one synthetic accelerator host (see
:func:`cloud_host`: QAT C62x, X710 and A100 PFs with their VFs, T4s, PAC
FPGAs with one VF, Xilinx U250 cards, plus ordinary platform functions)
whose devices both this project's drivers and upstream Cyborg's drivers
recognise, and times, interleaved in the same loop so machine noise hits
all of them alike:

- ``cyborg-nova``: one full discovery cycle of every bundled driver
  (nic_sriov configured for the host's NICs), in-process, as nova-compute
  runs it each update;
- ``upstream Cyborg``: one agent cycle (``discover()`` of its five
  drivers: nvidia_gpu, intel_fpga, xilinx_fpga, intel_qat, intel_nic),
  openstack-cyborg from PyPI in its own venv (``.venv-cyborg``), pointed
  at the same tree by ``benchmarks/upstream_cyborg.py``; each cycle is
  timed inside that process (its pipe round trip is not counted);
- ``lspci``: one ``lspci -nnn -D -A linux-sysfs -O sysfs.path=<tree>/bus/pci``
  run (upstream Cyborg's GPU and Xilinx drivers each spawn one per cycle);
- ``class-scan floor``: reading every function's ``class`` file and
  nothing else.

Peak memory: each discoverer once more in a fresh process (``VmHWM``
after one discovery, and what the discovery added to the process).

Prints a Markdown table and writes it to ``benchmarks/results/discovery.md``
(and the raw numbers to ``discovery.json`` beside it, for the plots).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from oslo_config import cfg

from cyborg_drivers import discovery
from cyborg_drivers.fake import hosttree
from cyborg_drivers import loader

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
CYBORG_VENV = os.path.join(REPO_ROOT, '.venv-cyborg')
UPSTREAM = os.path.join(HERE, 'upstream_cyborg.py')
DRIVERS = ['nvidia_gpu', 'intel_fpga', 'xilinx_fpga', 'intel_qat',
           'nic_sriov']
SIZES = (100, 600, 2000)
OURS, CYBORG, LSPCI, FLOOR = ('cyborg-nova discovery (all drivers)',
                              'upstream Cyborg agent cycle (5 drivers)',
                              'lspci -nnn -D (one run)', 'class-scan floor')
#: Functions of one group of accelerators in cloud_host().
GROUP_FUNCTIONS = 17 + 33 + 17 + 1 + 2 + 2
MIN_NOISE = 20


def _pf(bus: int, vendor: int, device: int, cls: int, driver: str,
        numa: int, vfs: int = 0, vf_device: int = 0, vf_driver=None,
        totalvfs: int = 0, **extra) -> dict:
    dev = {'address': '0000:%02x:00.0' % bus, 'vendor': vendor,
           'device': device, 'class': cls, 'driver': driver,
           'numa_node': numa, **extra}
    if vfs or totalvfs:
        dev['sriov'] = {'totalvfs': max(vfs, totalvfs, 1), 'numvfs': vfs,
                        'vf_device': vf_device, 'vf_driver': vf_driver}
    return dev


def cloud_host(functions: int) -> dict:
    """A host of exactly ``functions`` PCI functions (at least 92).

    Whole groups of accelerators, each: one QAT C62x (8086:37c8) with 16
    VFs, one X710 (8086:1572) with 32 VFs, one A100 with 16 VFs, one T4,
    one PAC Arria 10 with its one VF (the port), one Xilinx U250 (mgmt and
    user functions): 72 functions. The rest are ordinary platform
    functions. Ids and files are chosen so that upstream Cyborg's drivers
    recognise the same devices (it knows only these QAT and NIC ids, and
    its FPGA driver needs ``sriov_totalvfs`` on a PAC).
    """
    groups = (functions - MIN_NOISE) // GROUP_FUNCTIONS
    if groups < 1:
        raise ValueError('a host needs at least %d functions'
                         % (GROUP_FUNCTIONS + MIN_NOISE))
    noise = functions - groups * GROUP_FUNCTIONS
    devices = list(hosttree.synthetic_profile(
        accelerator_pfs=0, noise=noise)['devices'])
    bus, n = 0x10, 0
    for g in range(groups):
        numa = g % 2
        devices += [
            # A C62x has no qat/ directory (only 4xxx and later do).
            _pf(bus, 0x8086, 0x37c8, 0x0b4000, 'c6xx', numa, 16, 0x37c9,
                'c6xxvf'),
            _pf(bus + 1, 0x8086, 0x1572, 0x020000, 'i40e', numa, 32, 0x154c,
                'iavf', totalvfs=64, net=['ens%df0' % g]),
            _pf(bus + 2, 0x10de, 0x20b0, 0x030200, 'nvidia', numa, 16,
                0x20b0, 'nvidia'),
            _pf(bus + 3, 0x10de, 0x1eb8, 0x030200, 'nvidia', numa),
            _pf(bus + 4, 0x8086, 0x09c4, 0x120000, 'intel-fpga-pci', numa,
                1, 0x09c5, 'intel-fpga-pci', fpga={
                    'layout': 'opae',
                    'interface_id': '9346116d-a52d-5ca8-b06a-a9a389ef7c8d',
                    'afu_id': 'd8424dc4-a4a3-c413-f89e-433683f9040b'}),
            _pf(bus + 5, 0x10ee, 0x5004, 0x120000, 'xclmgmt', numa),
            dict(_pf(bus + 5, 0x10ee, 0x5005, 0x120000, 'xocl', numa),
                 address='0000:%02x:00.1' % (bus + 5)),
        ]
        bus += 6
        n += 1
    return hosttree.normalise_profile({
        'name': 'cloud-host-%d' % functions,
        'description': 'benchmark host: %d x (QAT C62x x 16 VFs, X710 x 32 '
                       'VFs, A100 x 16 VFs, T4, PAC, U250) + %d others'
                       % (groups, noise),
        'devices': devices})


def build_host(workdir: str, functions: int):
    profile = cloud_host(functions)
    root = os.path.join(workdir, 'sys-%d' % functions)
    hosttree.build_tree(profile, root)
    nics = [d for d in profile['devices'] if d.get('net')]
    return root, profile, nics


def make_discoverer(root: str, nics: list[dict]) -> discovery.Discoverer:
    conf = cfg.ConfigOpts()
    conf([])
    drivers = loader.load(conf, DRIVERS)
    conf.set_override('physical_device_mappings',
                      ['physnet%d:%s' % (i, d['net'][0])
                       for i, d in enumerate(nics)],
                      group='cyborg_nic_sriov')
    return discovery.Discoverer(drivers, root)


def class_scan(root: str) -> int:
    base = os.path.join(root, 'bus', 'pci', 'devices')
    count = 0
    for name in os.listdir(base):
        with open(os.path.join(base, name, 'class'), 'rb') as f:
            f.read()
        count += 1
    return count


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000.0


class UpstreamCyborg:
    """Upstream Cyborg's agent cycle in its own venv, one cycle a call."""

    def __init__(self, root: str) -> None:
        self.python = os.path.join(CYBORG_VENV, 'bin', 'python')
        self.root = root
        self.proc = subprocess.Popen(
            [self.python, UPSTREAM, '--tree', root, '--serve'],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ready = self.proc.stdout.readline()
        if not ready:
            raise RuntimeError('upstream Cyborg runner did not start')
        self.last = None

    @classmethod
    def available(cls) -> bool:
        return os.path.exists(os.path.join(CYBORG_VENV, 'bin', 'python'))

    def cycle(self) -> float:
        self.proc.stdin.write('cycle\n')
        self.proc.stdin.flush()
        self.last = json.loads(self.proc.stdout.readline())
        return self.last['ms']

    def once(self) -> dict:
        out = subprocess.run([self.python, UPSTREAM, '--tree', self.root],
                             capture_output=True, text=True, check=True)
        return json.loads(out.stdout)

    def close(self) -> None:
        self.proc.stdin.write('quit\n')
        self.proc.stdin.close()
        self.proc.wait(30)


_OURS_ONCE = r'''
import json, sys
sys.path.insert(0, %(here)r)
import discovery as bench
def kib(key):
    for line in open('/proc/self/status'):
        if line.startswith(key + ':'):
            return int(line.split()[1])
nics = [{'net': [n]} for n in %(nics)r]
d = bench.make_discoverer(%(root)r, nics)
rss = kib('VmRSS')
result = d.discover()
print(json.dumps({'rss_before_kib': rss, 'hwm_after_kib': kib('VmHWM'),
                  'accelerators': len(result.accelerators),
                  'units': sum(a.total for a in result.accelerators)}))
'''

_LSPCI_ONCE = r'''
import json, resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True)
print(json.dumps({'hwm_after_kib':
                  resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
'''


def memory(root: str, nics: list[dict], lspci: list[str],
           upstream: UpstreamCyborg | None) -> dict:
    """Peak RSS of one discovery, each in a fresh process."""
    ours = json.loads(subprocess.run(
        [sys.executable, '-c', _OURS_ONCE % {
            'here': HERE, 'root': root,
            'nics': [d['net'][0] for d in nics]}],
        capture_output=True, text=True, check=True,
        cwd=REPO_ROOT).stdout)
    result = {OURS: ours, LSPCI: json.loads(subprocess.run(
        [sys.executable, '-c', _LSPCI_ONCE] + lspci,
        capture_output=True, text=True, check=True).stdout)}
    if upstream is not None:
        result[CYBORG] = upstream.once()
    return result


def measure(functions: int, runs: int, workdir: str,
            with_cyborg: bool) -> dict:
    root, profile, nics = build_host(workdir, functions)
    count = len(os.listdir(os.path.join(root, 'bus', 'pci', 'devices')))
    discoverer = make_discoverer(root, nics)
    lspci = ['lspci', '-nnn', '-D', '-A', 'linux-sysfs', '-O',
             'sysfs.path=%s/bus/pci' % root]
    listed = subprocess.run(lspci, capture_output=True, text=True,
                            check=True).stdout.count('\n')
    result = discoverer.discover()
    upstream = UpstreamCyborg(root) if with_cyborg else None
    samples = {OURS: [], LSPCI: [], FLOOR: []}
    fns = [(samples[OURS], discoverer.discover),
           (samples[LSPCI], lambda: subprocess.run(
               lspci, stdout=subprocess.DEVNULL, check=True)),
           (samples[FLOOR], lambda: class_scan(root))]
    per_driver = {}
    if upstream is not None:
        samples[CYBORG] = []
        fns.insert(1, (samples[CYBORG], upstream.cycle))
    try:
        for _ in range(3):  # warm the page cache and the code paths
            for _, fn in fns:
                fn()
        for _ in range(runs):
            for bucket, fn in fns:
                if bucket is samples.get(CYBORG):
                    bucket.append(fn())
                    for name, ms in upstream.last['drivers'].items():
                        per_driver.setdefault(name, []).append(ms)
                else:
                    bucket.append(timed(fn))
        mem = memory(root, nics, lspci, upstream)
    finally:
        if upstream is not None:
            upstream.close()
    shutil.rmtree(root, ignore_errors=True)
    return {
        'functions': count, 'listed_by_lspci': listed,
        'description': profile['description'],
        'ours_found': {
            'accelerators': len(result.accelerators),
            'units': sum(a.total for a in result.accelerators),
            'by_driver': _ours_by_driver(result.accelerators)},
        'samples': samples,
        'cyborg_per_driver_ms': {n: statistics.median(v)
                                 for n, v in per_driver.items()},
        'memory': mem,
    }


def _ours_by_driver(accelerators) -> dict:
    out = {}
    for a in accelerators:
        entry = out.setdefault(a.driver, {'accelerators': 0, 'units': 0})
        entry['accelerators'] += 1
        entry['units'] += a.total
    return out


def machine() -> str:
    return '%d cores, Python %s, %s' % (
        os.cpu_count() or 0, platform.python_version(),
        subprocess.run(['lspci', '--version'], capture_output=True,
                       text=True).stdout.strip())


def report(hosts: list, runs: int) -> str:
    lines = [
        '# Discovery on synthetic hosts of %s PCI functions'
        % ', '.join('{:,}'.format(h['functions']) for h in hosts),
        '',
        'Generated by `benchmarks/discovery.py`: %d interleaved runs of each '
        'discoverer per host, after 3 warm-up runs. Machine: %s.'
        % (runs, machine()),
        '',
        'Each host is whole groups of one QAT C62x (16 VFs), one X710 (32 '
        'VFs), one A100 (16 VFs), one T4, one PAC Arria 10 (1 VF) and one '
        'Xilinx U250 (2 functions), plus ordinary platform functions. '
        'cyborg-nova runs in this process; upstream Cyborg (openstack-cyborg '
        '%s from PyPI, its own venv) runs its agent\'s cycle, `discover()` '
        'of its five drivers, in a second process that times each cycle '
        'itself, interleaved with the others.'
        % _cyborg_version(hosts),
        '',
        '| host | what | median ms | min ms | max ms | vs cyborg-nova |',
        '|---|---|---:|---:|---:|---:|',
    ]
    for h in hosts:
        ours = statistics.median(h['samples'][OURS])
        for name, values in h['samples'].items():
            med = statistics.median(values)
            lines.append('| %s functions | %s | %.2f | %.2f | %.2f | %s |' % (
                '{:,}'.format(h['functions']), name, med, min(values),
                max(values), '1x' if name == OURS else '%.1fx' % (med / ours)))
    lines += [
        '',
        '## What each found (same tree)',
        '',
        '| host | cyborg-nova: accelerators (units) by driver | upstream '
        'Cyborg: devices / deployables (= providers it would create) by '
        'driver | upstream Cyborg ms per driver (median) |',
        '|---|---|---|---|',
    ]
    for h in hosts:
        ours = ', '.join('%s %d (%d)' % (n, v['accelerators'], v['units'])
                         for n, v in sorted(h['ours_found']['by_driver']
                                            .items()))
        up = h['memory'].get(CYBORG)
        theirs = ', '.join(
            '%s %d / %d' % (n.replace('_driver', ''), v['devices'],
                            v['deployables'])
            for n, v in up['found'].items()) if up else 'not run'
        per = ', '.join('%s %.1f' % (n.replace('_driver', ''), ms)
                        for n, ms in h['cyborg_per_driver_ms'].items())
        lines.append('| %s | %s; total %d (%d) | %s | %s |' % (
            '{:,}'.format(h['functions']), ours,
            h['ours_found']['accelerators'], h['ours_found']['units'],
            theirs, per or 'n/a'))
    lines += [
        '',
        '## Peak memory of one discovery (fresh process each)',
        '',
        '`peak` = the process\'s peak RSS (VmHWM) after one discovery; '
        '`added` = peak minus the RSS just before the discovery (imports '
        'and driver loading excluded). lspci: its own peak RSS.',
        '',
        '| host | cyborg-nova peak MiB | added MiB | upstream Cyborg peak MiB '
        '| added MiB | lspci peak MiB |',
        '|---|---:|---:|---:|---:|---:|',
    ]
    for h in hosts:
        m = h['memory']
        o, u = m[OURS], m.get(CYBORG)
        lines.append('| %s | %.1f | %.1f | %s | %s | %.1f |' % (
            '{:,}'.format(h['functions']), o['hwm_after_kib'] / 1024.0,
            (o['hwm_after_kib'] - o['rss_before_kib']) / 1024.0,
            '%.1f' % (u['hwm_after_kib'] / 1024.0) if u else 'n/a',
            '%.1f' % ((u['hwm_after_kib'] - u['rss_before_kib']) / 1024.0)
            if u else 'n/a',
            m[LSPCI]['hwm_after_kib'] / 1024.0))
    lines += [
        '',
        'Notes: upstream Cyborg\'s NIC and QAT drivers report one '
        'deployable (one Placement provider) per VF, which is where its '
        'deployable counts come from; its GPU driver reports each A100 VF '
        'as a GPU of its own (`[gpu_devices] filter_sriov_vfs` is off by '
        'default), cyborg-nova reports the A100 PF with its VFs as '
        'inventory. Its lspci-based drivers (GPU, Xilinx) spawn `lspci` '
        'through privsep in client mode off (in-process), so no privsep '
        'daemon round trip is counted: a real agent pays that too. '
        'Its Xilinx driver only takes `lspci` lines reading `Xilinx '
        'Corporation Device` (cards `pci.ids` does not name) and Debian\'s '
        '`pci.ids` names every Alveo card, so its `lspci` wrapper reads a '
        'copy of `pci.ids` without Xilinx device names (pci.ids: %s); with '
        'the system\'s file it finds no Xilinx card.' % _cyborg_pci_ids(hosts),
        '',
    ]
    return '\n'.join(lines)


def _cyborg_fact(hosts, key: str, missing: str) -> str:
    """What upstream Cyborg's runner said of itself (version, pci.ids)."""
    for h in hosts:
        up = h['memory'].get(CYBORG)
        if up:
            return up[key]
    return missing


def _cyborg_pci_ids(hosts) -> str:
    return _cyborg_fact(hosts, 'pci_ids', 'n/a')


def _cyborg_version(hosts) -> str:
    return _cyborg_fact(hosts, 'version', '(not run)')


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--runs', type=int, default=30)
    parser.add_argument('--sizes', default=','.join(map(str, SIZES)),
                        help='PCI functions of each host (default '
                             '100,600,2000)')
    parser.add_argument('--no-cyborg', action='store_true',
                        help='skip upstream Cyborg (else it needs '
                             '.venv-cyborg: tools/setup-bench-venvs.sh)')
    parser.add_argument('--output', default=os.path.join(
        HERE, 'results', 'discovery.md'))
    args = parser.parse_args(argv)
    with_cyborg = not args.no_cyborg
    if with_cyborg and not UpstreamCyborg.available():
        raise SystemExit('no %s: run tools/setup-bench-venvs.sh, or pass '
                         '--no-cyborg' % CYBORG_VENV)
    workdir = tempfile.mkdtemp(prefix='cyborg-nova-bench-')
    try:
        hosts = []
        for size in [int(s) for s in args.sizes.split(',')]:
            print('discovery: %d functions' % size, file=sys.stderr)
            hosts.append(measure(size, args.runs, workdir, with_cyborg))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    text = report(hosts, args.runs)
    print(text)
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, 'w') as f:
        f.write(text)
    with open(os.path.splitext(args.output)[0] + '.json', 'w') as f:
        json.dump({'runs': args.runs, 'machine': machine(), 'hosts': hosts},
                  f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
