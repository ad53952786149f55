"""The README's demo: cyborg-nova's view of a sample host and of this one.

Every step is a command an operator can type; the demo prints it, runs it
and shows its output.
"""

import argparse
import os
import shlex
import subprocess
import sys
import tempfile

BIN = os.path.dirname(sys.executable)


def run(*argv, check=True):
    shown = ' '.join(shlex.quote(a) for a in argv)
    print('\n$ %s' % shown, flush=True)
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ['PATH'])
    result = subprocess.run(argv, env=env)
    if check and result.returncode:
        sys.exit('demo step failed (exit %d): %s'
                 % (result.returncode, shown))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--profile', default='mixed-host',
                        help='shipped host profile to show (default '
                             'mixed-host; also gpu-host, fpga-host, '
                             'crypto-nic-host)')
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix='cyborg-nova-demo-')
    tree = os.path.join(work, 'sys')
    conf = os.path.join(work, 'nova.conf')
    with open(conf, 'w') as f:
        f.write('[cyborg_nova]\n'
                'enabled_drivers = nvidia_gpu,intel_fpga,xilinx_fpga,'
                'intel_qat,nic_sriov\n'
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
    print('\nThe sample tree stays at %s for you to explore.' % tree)


if __name__ == '__main__':
    main()
