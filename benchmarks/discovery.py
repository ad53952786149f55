"""Discovery cost on a large synthetic host, side by side with lspci.

Builds one dense accelerator host (see dense_host: SR-IOV NICs, QAT and
GPUs with their VFs, FPGAs, plus ordinary platform devices) of about 690
PCI functions and times, interleaved in the same run so
machine noise hits all of them alike:

- ``cyborg-nova``: one full discovery cycle of every bundled driver
  (nic_sriov configured for the host's NICs), in-process, as nova-compute
  runs it each update;
- ``lspci``: one ``lspci -nnn -D -A linux-sysfs -O sysfs.path=<tree>/bus/pci``
  run, which upstream Cyborg's drivers spawn per driver, every cycle;
- ``class-scan floor``: reading every function's ``class`` file and
  nothing else: what a discovery that reads every function pays at least
  (cyborg-nova reads fewer: VFs of claimed PFs are named, not read).

Prints a Markdown table and writes it to ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import os
import resource
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
DRIVERS = ['nvidia_gpu', 'intel_fpga', 'xilinx_fpga', 'intel_qat',
           'nic_sriov']


def _pf(bus: int, vendor: int, device: int, cls: int, driver: str,
        numa: int, vfs: int = 0, vf_device: int = 0, **extra) -> dict:
    dev = {'address': '0000:%02x:00.0' % bus, 'vendor': vendor,
           'device': device, 'class': cls, 'driver': driver,
           'numa_node': numa, **extra}
    if vfs:
        dev['sriov'] = {'totalvfs': max(vfs, 16), 'numvfs': vfs,
                        'vf_device': vf_device}
    return dev


def dense_host(noise: int = 40) -> dict:
    """A dense, realistic accelerator host of about 690 PCI functions.

    VF counts are what the hardware offers: 128 per E810 port, 16 per
    QAT 4xxx and A100, one per PAC (its port), none on a T4.
    """
    devices = list(hosttree.synthetic_profile(
        accelerator_pfs=0, noise=noise)['devices'])
    bus = 0x20
    plan = (
        [('e810', 4)] + [('qat', 3)] + [('a100', 4)] + [('pac', 2)]
        + [('t4', 8)] + [('alveo', 1)])
    n = 0
    for kind, count in plan:
        for _ in range(count):
            numa = n % 2
            if kind == 'e810':
                dev = _pf(bus, 0x8086, 0x1592, 0x020000, 'ice', numa, 128,
                          0x1889, net=['ens%df0' % n])
            elif kind == 'qat':
                dev = _pf(bus, 0x8086, 0x4940, 0x0b4000, '4xxx', numa, 16,
                          0x4941, qat={'cfg_services': 'sym;asym',
                                       'state': 'up'})
            elif kind == 'a100':
                dev = _pf(bus, 0x10de, 0x20b0, 0x030200, 'nvidia', numa, 16,
                          0x20b0)
            elif kind == 'pac':
                dev = _pf(bus, 0x8086, 0x09c4, 0x120000, 'intel-fpga-pci',
                          numa, 1, 0x09c5, fpga={
                              'layout': 'opae',
                              'interface_id':
                                  '9346116d-a52d-5ca8-b06a-a9a389ef7c8d',
                              'afu_id':
                                  'd8424dc4-a4a3-c413-f89e-433683f9040b'})
            elif kind == 't4':
                dev = _pf(bus, 0x10de, 0x1eb8, 0x030200, 'nvidia', numa)
            else:
                devices.append(_pf(bus, 0x10ee, 0x5004, 0x120000,
                                   'xclmgmt', numa))
                dev = dict(_pf(bus, 0x10ee, 0x5005, 0x120000, 'xocl',
                               numa), address='0000:%02x:00.1' % bus)
            devices.append(dev)
            bus += 1
            n += 1
    return hosttree.normalise_profile({
        'name': 'dense-host',
        'description': 'benchmark host: 4 E810 x 128 VFs, 3 QAT x 16, '
                       '4 A100 x 16, 2 PAC, 8 T4, 1 Alveo, %d others'
                       % noise,
        'devices': devices})


def build_host(workdir: str, noise: int):
    profile = dense_host(noise)
    root = os.path.join(workdir, 'sys')
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--runs', type=int, default=30)
    parser.add_argument('--noise', type=int, default=40,
                        help='ordinary platform functions (default 40)')
    parser.add_argument('--output', default=os.path.join(
        HERE, 'results', 'discovery.md'))
    args = parser.parse_args(argv)

    workdir = tempfile.mkdtemp(prefix='cyborg-nova-bench-')
    root, profile, nics = build_host(workdir, args.noise)
    functions = len(os.listdir(os.path.join(root, 'bus', 'pci', 'devices')))
    discoverer = make_discoverer(root, nics)
    lspci = ['lspci', '-nnn', '-D', '-A', 'linux-sysfs', '-O',
             'sysfs.path=%s/bus/pci' % root]
    listed = subprocess.run(lspci, capture_output=True, text=True,
                            check=True).stdout.count('\n')
    result = discoverer.discover()
    units = sum(a.total for a in result.accelerators)

    samples = {'cyborg-nova discovery (all drivers)': [],
               'lspci -nnn -D (one run)': [],
               'class-scan floor': []}
    fns = list(zip(samples.values(), [
        discoverer.discover,
        lambda: subprocess.run(lspci, stdout=subprocess.DEVNULL, check=True),
        lambda: class_scan(root)]))
    for _ in range(3):  # warm the page cache and the code paths
        for _, fn in fns:
            fn()
    for _ in range(args.runs):
        for bucket, fn in fns:
            bucket.append(timed(fn))

    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ours = statistics.median(samples['cyborg-nova discovery (all drivers)'])
    theirs = statistics.median(samples['lspci -nnn -D (one run)'])
    lines = [
        '# Discovery on a synthetic host of %d PCI functions' % functions,
        '',
        '%d accelerators (%d assignable units) among %d functions; lspci '
        'listed %d. %d interleaved runs each, after 3 warm-up runs. Python '
        '%s.' % (len(result.accelerators), units, functions, listed,
                 args.runs, sys.version.split()[0]),
        '',
        '| what | median ms | min ms | max ms |',
        '|---|---:|---:|---:|',
    ]
    for name, values in samples.items():
        lines.append('| %s | %.2f | %.2f | %.2f |' % (
            name, statistics.median(values), min(values), max(values)))
    lines += [
        '',
        'cyborg-nova / lspci median: **%.2f** (target: at most 0.25). '
        'Peak RSS of this benchmark process: %.1f MiB.'
        % (ours / theirs, rss_kib / 1024.0),
        '',
    ]
    text = '\n'.join(lines)
    print(text)
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, 'w') as f:
        f.write(text)
    return 0


if __name__ == '__main__':
    sys.exit(main())
