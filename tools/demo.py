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

"""The README's demo: cyborg-nova's view of a sample host and of this one.

Every step is a command an operator can type; the demo prints it, runs it
and shows its output.
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request

BIN = os.path.dirname(sys.executable)
HERE = os.path.dirname(os.path.abspath(__file__))
NODENAME = 'demo-compute'
ENABLED = 'nvidia_gpu,intel_fpga,xilinx_fpga,intel_qat,nic_sriov'
# Sample flavors' extra specs, as an operator would set them with
# "openstack flavor set --property KEY=VALUE".
FLAVORS = [
    ('fpga.intel', {'resources:FPGA': '1',
                    'trait:CUSTOM_FPGA_INTEL': 'required'}),
    ('fpga.nlb0', {'resources:FPGA': '1',
                   'trait:CUSTOM_FPGA_FUNCTION_ID_INTEL_'
                   'D8424DC4A4A3C413F89E433683F9040B': 'required'}),
    ('gpu.t4', {'resources:PGPU': '1',
                'trait:CUSTOM_NVIDIA_1EB8': 'required'}),
    ('qat.2vf', {'resources:CUSTOM_QAT': '2'}),
    ('gpu.t4x3', {'resources:PGPU': '3'}),
    ('nic.physnet1', {'resources:CUSTOM_NIC': '1',
                      'trait:CUSTOM_PHYSNET1': 'required'}),
]


def run(*argv, check=True):
    shown = ' '.join(shlex.quote(a) for a in argv)
    print('\n$ %s' % shown, flush=True)
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ['PATH'])
    result = subprocess.run(argv, env=env)
    if check and result.returncode:
        sys.exit('demo step failed (exit %d): %s'
                 % (result.returncode, shown))


def start_placement(work):
    proc = subprocess.Popen(
        [sys.executable, os.path.join(HERE, 'placement_server.py'),
         '--state-dir', os.path.join(work, 'placement')],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    # Placement's own start-up log lines come first.
    for line in proc.stdout:
        if line.startswith('listening '):
            return proc, line.split()[1]
    proc.kill()
    sys.exit('Placement did not start')


def placement_get(endpoint, path, version='1.36'):
    request = urllib.request.Request(
        endpoint + path, headers={
            'X-Auth-Token': 'admin',
            'OpenStack-API-Version': 'placement %s' % version})
    with urllib.request.urlopen(request) as resp:
        return json.load(resp)


def candidates(endpoint, extra_specs):
    """GET /allocation_candidates for a flavor's extra specs."""
    resources = ['VCPU:1', 'MEMORY_MB:512']
    required = []
    for key, value in extra_specs.items():
        if key.startswith('resources:'):
            resources.append('%s:%s' % (key.split(':', 1)[1], value))
        elif key.startswith('trait:') and value == 'required':
            required.append(key.split(':', 1)[1])
    query = {'resources': ','.join(resources)}
    if required:
        query['required'] = ','.join(required)
    body = placement_get(endpoint, '/allocation_candidates?'
                         + urllib.parse.urlencode(query))
    names = {rp['uuid']: rp['name'] for rp in placement_get(
        endpoint, '/resource_providers')['resource_providers']}
    picks = []
    for ar in body['allocation_requests']:
        accel = [uuid for uuid, alloc in ar['allocations'].items()
                 if not {'VCPU', 'MEMORY_MB'} & set(alloc['resources'])]
        picks.append(sorted(names[uuid] for uuid in accel))
    return picks


def placement_part(args, work, tree, conf):
    print('\n== The same host reported to a real Placement, through Nova\'s '
          'report client')
    proc, endpoint = start_placement(work)
    env = {'OS_AUTH_TYPE': 'admin_token', 'OS_TOKEN': 'admin',
           'OS_ENDPOINT': endpoint, 'OS_PLACEMENT_API_VERSION': '1.39'}
    os.environ.update(env)
    try:
        print('Placement (openstack-placement, SQLite, noauth2) listens on '
              '%s' % endpoint)
        print('The demo reports the host as nova-compute does with '
              '[cyborg_nova] auto_ready = True (in %s): every discovered '
              'device is offered at once. On a real host, without it, a '
              'new device stays inactive and fully reserved until '
              '"cyborg-nova device-set-state <address> ready".' % conf)
        run(sys.executable, '-W', 'ignore',
            os.path.join(HERE, 'report_host.py'), '--placement', endpoint,
            '--nodename', NODENAME, '--sysfs-root', tree,
            '--state-path', os.path.join(work, 'state.sqlite'),
            '--config-file', conf, '--drivers', ENABLED, '--cycles', '2')
        run('cyborg-nova', 'tree', '--nodename', NODENAME)

        print('\n== Allocation candidates of sample flavors')
        for name, specs in FLAVORS:
            picks = candidates(endpoint, specs)
            shown = ' '.join('%s=%s' % kv for kv in specs.items())
            print('\nflavor %s (%s): %d candidate(s)'
                  % (name, shown, len(picks)))
            for pick in picks:
                print('    accelerator provider(s): %s' % ', '.join(pick))

        # The venv's openstack by its full path: a fresh shell has no
        # venv on its PATH.
        openstack = os.path.join(BIN, 'openstack')
        commands = [
            [openstack, 'resource', 'provider', 'list'],
            [openstack, 'allocation', 'candidate', 'list', '--resource',
             'FPGA=1', '--required', 'CUSTOM_FPGA_INTEL'],
        ]
        print('\n== The same providers with the openstack CLI (any shell, '
              'while Placement is up):\n')
        print('  export %s' % ' '.join('%s=%s' % kv for kv in env.items()))
        for argv in commands:
            print('  %s' % shlex.join(argv))
        for argv in commands:
            run(*argv, check=False)
        if args.hold or (args.wait and sys.stdin.isatty()):
            print('\nPlacement stays up while you try them. Press Enter '
                  'to stop it.', flush=True)
            sys.stdin.readline()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--profile', default='mixed-host',
                        help='shipped host profile to show (default '
                             'mixed-host; also gpu-host, fpga-host, '
                             'crypto-nic-host)')
    parser.add_argument('--no-wait', dest='wait', action='store_false',
                        help='do not wait for Enter before stopping '
                             'Placement (it never waits without a '
                             'terminal)')
    parser.add_argument('--hold', action='store_true',
                        help='keep Placement up until a line (or the end) '
                             'arrives on standard input, with or without '
                             'a terminal')
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix='cyborg-nova-demo-')
    tree = os.path.join(work, 'sys')
    conf = os.path.join(work, 'nova.conf')
    with open(conf, 'w') as f:
        # A demo trusts its sample devices; a real host does not, by
        # default (see the note printed with the Placement part).
        f.write('[cyborg_nova]\n'
                'enabled_drivers = %s\n'
                'auto_ready = True\n'
                % ENABLED +
                '[cyborg_nic_sriov]\n'
                'physical_device_mappings = physnet1:enp94s0f0\n')

    print('== Installed accelerator drivers')
    run('cyborg-nova', '--config-file', conf, 'driver-list')

    print('\n== A sample host: the %r profile built as a sysfs tree'
          % args.profile)
    run(sys.executable, '-m', 'cyborg_drivers.fake.hosttree',
        args.profile, tree)
    run('lspci', '-nn', '-A', 'linux-sysfs', '-O',
        'sysfs.path=%s/bus/pci' % tree, check=False)
    print('\n== What cyborg-nova reports for it (noise such as bridges, '
          'NVMe and the BMC VGA is left out)')
    run('cyborg-nova', '--config-file', conf, 'discover',
        '--sysfs-root', tree)
    run('cyborg-nova', '--config-file', conf, 'discover', '--sysfs-root',
        tree, '--driver', 'nic_sriov', '-f', 'json')

    print('\n== This machine\'s own /sys')
    run('cyborg-nova', 'discover', '--long')
    print('(no rows: this machine has no accelerators, only the devices '
          'lspci shows below)')
    run('lspci', '-nn', check=False)
    placement_part(args, work, tree, conf)
    print('\nThe sample tree stays at %s for you to explore.' % tree)
    print('\n== What next\n'
          '  - The commands are in %s (cyborg-nova --help, and\n'
          '    cyborg-nova help <command>).\n'
          '  - To install on a compute node: doc/source/install.rst (build\n'
          '    the release with tools/build-release.sh, install the wheel\n'
          '    into the virtualenv that holds Nova, check the host with\n'
          '    cyborg-nova config-check and cyborg-nova discover).\n'
          '  - The whole documentation: tox -e docs, then\n'
          '    doc/build/html/index.html.' % BIN)


if __name__ == '__main__':
    main()
