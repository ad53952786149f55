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

"""What the side-by-side benchmarks on Nova's libvirt driver share.

``spawn_path.py`` and ``update_cycle.py`` take the same options, load
Nova's harness the same way, run each host in each mode the same number
of times (the modes interleaved, their order alternating, as these
machines are noisy), and record their results the same way. Importing
this module imports nothing of Nova: :func:`load_harness` does, in the
order Nova needs.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from typing import Callable
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))


def parser(doc: str, sizes: str, output: str) -> argparse.ArgumentParser:
    """The options both benchmarks take; each adds its own run counts."""
    p = argparse.ArgumentParser(description=doc.split('\n')[0])
    p.add_argument('--sizes', default=sizes,
                   help='PCI functions of each host (at least 92), '
                        'comma-separated (default %s)' % sizes)
    p.add_argument('--repeats', type=int, default=3,
                   help='runs of each host in each mode (default 3)')
    p.add_argument('--no-profile', dest='profile', action='store_false',
                   help='skip the profiled run')
    p.add_argument('--output',
                   default=os.path.join(HERE, 'results', output))
    return p


def load_harness():
    """Nova's harness, loaded: (discovery module, libvirtharness module).

    This tree's code, not an installed copy, is what is measured; Nova
    runs in its native-thread mode, so thread CPU time is per thread.
    """
    os.environ.setdefault('OS_NOVA_DISABLE_EVENTLET_PATCHING', '1')
    sys.path.insert(0, os.path.dirname(HERE))
    warnings.filterwarnings('ignore')
    import nova.tests.functional  # noqa: F401
    sys.path.insert(0, HERE)
    import discovery
    import libvirtharness
    logging.getLogger('nova').setLevel(logging.WARNING)
    return discovery, libvirtharness


def machine() -> str:
    """The machine and the versions both benchmarks ran on."""
    from importlib import metadata
    import platform
    return '%d cores, Python %s, Nova %s (LibvirtDriver on fakelibvirt), ' \
        'Placement %s in-process' % (
            os.cpu_count() or 0, platform.python_version(),
            metadata.version('nova'),
            metadata.version('openstack-placement'))


def run_hosts(args, discovery, lh, prefix: str,
              measure: Callable[[str, dict, str, int], dict]) -> list[dict]:
    """Every host of ``args.sizes`` measured in every mode.

    ``measure(mode, host profile, workdir, repeat)`` is one run; its
    results are kept under each host's ``modes``.
    """
    hosts = [{'functions': n, 'description':
              discovery.cloud_host(n)['description'],
              'modes': {m: [] for m in lh.MODES}}
             for n in (int(s) for s in args.sizes.split(',') if s)]
    workdir = tempfile.mkdtemp(prefix=prefix)
    run = 0
    for repeat in range(args.repeats):
        for host in hosts:
            order = lh.MODES if repeat % 2 == 0 else lh.MODES[::-1]
            for mode in order:
                print('{:,} functions: {}, run {} of {}'.format(
                    host['functions'], mode, repeat + 1, args.repeats),
                    file=sys.stderr, flush=True)
                run += 1
                host['modes'][mode].append(measure(
                    mode, discovery.cloud_host(host['functions']),
                    os.path.join(workdir, str(run)), repeat))
    return hosts


def write(data: dict, report: Callable[[dict], str], output: str,
          started: float) -> None:
    """The report (Markdown, ``report(data)``) and its data (JSON)."""
    data['elapsed_s'] = time.perf_counter() - started
    text = report(data)
    print(text)
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    with open(output, 'w') as f:
        f.write(text)
    # The recorded file names no path of the machine that wrote it.
    data['args'] = dict(data['args'], output=os.path.basename(output))
    with open(os.path.splitext(output)[0] + '.json', 'w') as f:
        json.dump(data, f, indent=1)


def provider_tree(case, root: str) -> list:
    """(class, total, reserved, custom traits) of each child of ``root``.

    ``case``: a Nova functional test case of either harness (its
    ``placement`` fixture and provider helpers); what both modes are
    compared on.
    """
    resp = case.placement.get(
        '/resource_providers?in_tree=%s' % root, version='1.14')
    tree = []
    for rp in resp.body['resource_providers']:
        if rp['uuid'] == root:
            continue
        inventory = case._get_provider_inventory(rp['uuid'])
        traits = [t for t in case._get_provider_traits(rp['uuid'])
                  if t.startswith('CUSTOM_')]
        for rc, inv in sorted(inventory.items()):
            tree.append((rc, inv['total'], inv['reserved'],
                         tuple(sorted(traits))))
    return sorted(tree)
