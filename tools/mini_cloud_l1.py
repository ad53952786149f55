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

"""A server booted through Nova onto a real VF of a compute in L1.

``tools/mini-cloud.sh --nova-in-l1``: with the mini-cloud up on this
machine, L1 (tools/nested/run-l1.sh, a VM with Debian's kernel and an
emulated igb SR-IOV NIC) runs a nova-compute with ``compute_driver =
cyborg_nova.LibvirtDriver`` registered with the cloud's Nova and
Placement (tools/nested/l1-nova-compute.sh). Then, as an operator: a
flavor asking for one VF, and a server booted with it through Nova's API
from an image of L2's kernel and initramfs, which must land on L1 with
its allocation on the NIC's provider, a real VF in its libvirt guest
(bound to vfio-pci in L1), and the VF seen by L2's own kernel. Then hard
and soft reboot, stop and start, suspend and resume, rebuild (the same
VF each time), shelve (offloaded) and unshelve, resize on the same host
and its confirm: after each, L2 sees exactly one VF, the one L1's domain
has; the server deleted, the allocation gone and the VF back on igbvf.
Each step's time is printed; the last line is ``NOVA-IN-L1: ok`` or says
what failed.
"""

import json
import os
import subprocess
import tempfile
import time

import mini_cloud_conf as conf

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NESTED = os.path.join(TOP, 'tools', 'nested')
HOST = 'nested-l1'
FLAVOR = 'accel.nic.vf'
FLAVOR_BIG = 'accel.nic.vf.big'
#: The cloud's services L1's nova-compute reaches through its loopback.
FORWARDED = ('keystone', 'placement', 'glance', 'neutron', 'nova', 'rabbit',
             # The cloud's computes are configured with the databases
             # (Nova's service version checks read them).
             'mysql')
#: Under TCG on a loaded machine, nova-compute takes minutes to start.
SLOW = 1200


class Failure(Exception):
    """A check of the flow did not hold."""


class L1Compute:
    """The L1 run and the files it answers through."""

    def __init__(self, cloud) -> None:
        self.cloud = cloud
        self.work = os.environ.get('NESTED_WORK',
                                   os.path.join(TOP, '.nested'))
        self.control = tempfile.mkdtemp(prefix='control-', dir=self.work)
        self.checks = 0
        self.proc = None

    def start(self) -> None:
        c = self.cloud
        path = c.write(HOST + '.conf', conf.nova(
            c.c, host=HOST, profile_root='/sys', state_dir='/var/lib/nova'))
        env = dict(os.environ, NESTED_QUIET='1', L1_NOVA_CONF=path,
                   L1_VENV=c.venv, L1_REPO=TOP,
                   L1_FORWARD=' '.join(str(c.port[name])
                                       for name in FORWARDED),
                   L1_CONTROL=os.path.join('/nested', os.path.basename(
                       self.control)))
        out = open(os.path.join(c.logs, 'l1.out'), 'w')
        self.proc = subprocess.Popen(
            [os.path.join(NESTED, 'run-l1.sh'), '-d', 'igb', '-t',
             str(2 * SLOW), os.path.join(NESTED, 'l1-nova-compute.sh')],
            stdout=out, stderr=subprocess.STDOUT, env=env,
            start_new_session=True)
        out.close()
        # Stopped with the cloud whatever happens (run-l1.sh kills L1 on
        # SIGTERM).
        c.procs.append(('l1', self.proc))

    def status(self) -> list[str]:
        try:
            with open(os.path.join(self.control, 'status')) as f:
                return f.read().split()
        except OSError:
            return []

    def check(self) -> dict:
        """What L1 shows now: its guests' hostdevs and its VFs' drivers."""
        self.checks += 1
        result = os.path.join(self.control, 'result-%d' % self.checks)
        open(os.path.join(self.control, 'check-%d' % self.checks),
             'w').close()
        self.cloud.wait_for('L1 to answer check %d' % self.checks,
                            lambda: os.path.exists(result), timeout=SLOW,
                            proc=self.proc)
        with open(result) as f:
            return json.load(f)

    def stop(self) -> int | None:
        open(os.path.join(self.control, 'stop'), 'w').close()
        try:
            return self.proc.wait(300)
        except subprocess.TimeoutExpired:
            return None


def step(what: str, started: float, times: dict) -> None:
    times[what] = round(time.time() - started, 1)
    print('NOVA-IN-L1: %s (%.0fs)' % (what, times[what]), flush=True)


def run(cloud) -> int:
    """The flow; 0 when every check held."""
    l1 = L1Compute(cloud)
    times: dict = {}
    try:
        flow(cloud, l1, times)
    except Exception as exc:
        # The cloud's own failures (a command refused, a service that
        # died) end the flow as well as this module's checks.
        print('NOVA-IN-L1: FAILED: %s (logs in %s, L1 runs in %s/runs)'
              % (exc, cloud.logs, l1.work), flush=True)
        return 1
    finally:
        if l1.proc is not None:
            rc = l1.stop()
            print('NOVA-IN-L1: L1 stopped (exit %s); times %s'
                  % (rc, json.dumps(times)), flush=True)
    print('NOVA-IN-L1: ok', flush=True)
    return 0


def flow(cloud, l1: L1Compute, times: dict) -> None:
    started = time.time()
    l1.start()
    cloud.wait_for('L1 to start nova-compute',
                   lambda: 'compute' in l1.status(), timeout=SLOW,
                   proc=l1.proc)
    step('L1 up, nova-compute starting', started, times)
    cloud.wait_for('nova-compute of %s' % HOST, lambda: HOST in up_computes(
        cloud), timeout=SLOW, proc=l1.proc)
    cloud.run(cloud.bin('nova-manage'), '--config-file', cloud.nova_conf,
              'cell_v2', 'discover_hosts')
    step('nova-compute in L1 up', started, times)
    nic = []

    def reported():
        nic[:] = nic_providers(cloud)
        return nic
    cloud.wait_for('the NIC of %s in Placement' % HOST, reported,
                   timeout=SLOW, proc=l1.proc)
    step('its NIC in Placement (%s)' % nic[0]['name'], started, times)

    image = upload_l2_image(cloud)
    step('L2 image in Glance (its kernel and initramfs)', started, times)
    cloud.cli('flavor', 'create', '--ram', '256', '--disk', '1', '--vcpus',
              '1', '--property', 'resources:CUSTOM_NIC=1', '--property',
              'trait:CUSTOM_PHYSNET1=required', FLAVOR, show=True)
    cloud.cli('flavor', 'create', '--ram', '320', '--disk', '1', '--vcpus',
              '1', '--property', 'resources:CUSTOM_NIC=1', '--property',
              'trait:CUSTOM_PHYSNET1=required', FLAVOR_BIG)
    booted = time.time()
    out = cloud.cli('server', 'create', '--flavor', FLAVOR, '--image',
                    image, '--nic', 'none', '--wait', '-f', 'json',
                    'vf-server', user='demo', project='demo', show=True)
    server_id = json.loads(out)['id']
    server = json.loads(cloud.cli('server', 'show', server_id, '-f',
                                  'json'))
    if (server['status'], server.get('OS-EXT-SRV-ATTR:host')) != (
            'ACTIVE', HOST):
        raise Failure('the server is %s on %s' % (
            server['status'], server.get('OS-EXT-SRV-ATTR:host')))
    allocations = json.loads(cloud.cli(
        'resource', 'provider', 'allocation', 'show', server_id, '-f',
        'json', show=True))
    on_nic = [a for a in allocations
              if a['resource_provider'] == nic[0]['uuid']]
    if not on_nic or on_nic[0]['resources'] != {'CUSTOM_NIC': 1}:
        raise Failure('no CUSTOM_NIC allocation on %s: %s'
                      % (nic[0]['name'], allocations))
    vf, pf = guest_sees_its_vf(cloud, l1, server_id, 'the boot')
    step('server booted, L2 sees its VF', booted, times)
    print('NOVA-IN-L1: server %s on %s holds VF %s of %s (vfio-pci in L1)'
          % (server_id, HOST, vf, pf), flush=True)

    def server_cli(*argv):
        cloud.cli('server', *argv, user='demo', project='demo', show=True)

    def same_vf(what, *argv, status='ACTIVE'):
        t0 = time.time()
        server_cli(*argv)
        wait_status(cloud, server_id, status)
        now, _ = guest_sees_its_vf(cloud, l1, server_id, what)
        if now != vf:
            raise Failure('after the %s the guest has VF %s, not %s'
                          % (what, now, vf))
        step('%s: L2 sees its VF %s' % (what, vf), t0, times)

    same_vf('hard reboot', 'reboot', '--hard', '--wait', server_id)
    same_vf('soft reboot', 'reboot', '--soft', '--wait', server_id)
    server_cli('stop', server_id)
    wait_status(cloud, server_id, 'SHUTOFF')
    same_vf('stop and start', 'start', server_id)
    server_cli('suspend', server_id)
    wait_status(cloud, server_id, 'SUSPENDED')
    seen = l1.check()
    guest = domain(seen, server_id)
    if guest is None or guest['active'] or seen['vfs'][vf] != 'igbvf':
        raise Failure('suspended, L1 shows %s' % seen)
    print('NOVA-IN-L1: suspended: the guest saved, VF %s back on igbvf '
          'and still the server\'s' % vf, flush=True)
    same_vf('suspend and resume', 'resume', server_id)
    same_vf('rebuild', 'rebuild', '--image', image, '--wait', server_id)

    t0 = time.time()
    server_cli('shelve', server_id)
    wait_status(cloud, server_id, 'SHELVED_OFFLOADED')
    seen = l1.check()
    if domain(seen, server_id) is not None or seen['vfs'][vf] != 'igbvf':
        raise Failure('shelved, L1 shows %s' % seen)
    server_cli('unshelve', server_id)
    wait_status(cloud, server_id, 'ACTIVE')
    vf, _ = guest_sees_its_vf(cloud, l1, server_id, 'the unshelve')
    step('shelve (offloaded) and unshelve: L2 sees its VF %s' % vf, t0,
         times)

    t0 = time.time()
    server_cli('resize', '--flavor', FLAVOR_BIG, '--wait', server_id)
    wait_status(cloud, server_id, 'VERIFY_RESIZE')
    resized, _ = guest_sees_its_vf(cloud, l1, server_id, 'the resize')
    server_cli('resize', 'confirm', server_id)
    wait_status(cloud, server_id, 'ACTIVE')
    vf, _ = guest_sees_its_vf(cloud, l1, server_id, 'the confirm')
    if vf != resized:
        raise Failure('the confirm changed the VF from %s to %s'
                      % (resized, vf))
    step('resize on the same host, confirmed: L2 sees its VF %s' % vf,
         t0, times)

    deleted = time.time()
    cloud.cli('server', 'delete', '--wait', server_id, user='demo',
              project='demo', show=True)
    step('server deleted', deleted, times)
    left = json.loads(cloud.cli('resource', 'provider', 'allocation',
                                'show', server_id, '-f', 'json'))
    if left:
        raise Failure('allocations left after the delete: %s' % left)
    seen = l1.check()
    if seen['domains'] or any(d != 'igbvf' for d in seen['vfs'].values()):
        raise Failure('after the delete L1 shows %s' % seen)
    print('NOVA-IN-L1: after the delete VF %s is back on igbvf, no guest '
          'in L1, no allocation' % vf, flush=True)
    # nova-compute held the VF at the delete and scrubbed it through its
    # privsep daemon and L1's kernel; then nothing is held and the NIC's
    # provider has nothing reserved.
    scrubbed = time.time()
    for _ in range(60):
        seen = l1.check()
        if seen['held'] == []:
            break
        time.sleep(2)
    else:
        raise Failure('units still held in L1 after the delete: %s'
                      % seen['held'])
    nic = nic_providers(cloud)[0]
    inventory = json.loads(cloud.cli(
        'resource', 'provider', 'inventory', 'show', nic['uuid'],
        'CUSTOM_NIC', '-f', 'json'))
    if inventory['reserved'] != 0:
        raise Failure('the NIC keeps %s reserved after the scrub'
                      % inventory['reserved'])
    print('NOVA-IN-L1: the freed VFs were scrubbed by L1\'s nova-compute '
          '(nothing held %.0f s after the delete, nothing reserved)'
          % (time.time() - scrubbed), flush=True)
    cloud.cli('flavor', 'delete', FLAVOR, FLAVOR_BIG)
    step('whole flow', started, times)


def upload_l2_image(cloud) -> str:
    """The L2 guest as a Glance image booting Debian's kernel: its id.

    The kernel and L2's initramfs (tools/nested/mk-initramfs.sh) as
    ``aki``/``ari`` images, which Nova's libvirt driver boots directly; L2
    prints the PCI functions it sees on its serial console, which Nova
    logs to the instance's ``console.log``.
    """
    work = os.environ.get('NESTED_WORK', os.path.join(TOP, '.nested'))
    boot = os.path.join(work, 'kernel', 'boot')
    kernel = os.path.join(boot, sorted(
        n for n in os.listdir(boot) if n.startswith('vmlinuz-'))[-1])
    ids = {}
    for name, path, kind in (('l2-kernel', kernel, 'aki'),
                             ('l2-initramfs', os.path.join(
                                 work, 'initramfs-l2.gz'), 'ari')):
        ids[kind] = cloud.cli(
            'image', 'create', '--disk-format', kind, '--container-format',
            kind, '--public', '--file', path, '-f', 'value', '-c', 'id',
            name).strip()
    return cloud.cli(
        'image', 'create', '--disk-format', 'raw', '--container-format',
        'bare', '--public', '--file', os.path.join(cloud.work, 'tiny.img'),
        '--property', 'kernel_id=%s' % ids['aki'],
        '--property', 'ramdisk_id=%s' % ids['ari'],
        '--property', 'os_command_line=console=ttyS0 panic=-1 loglevel=3',
        '-f', 'value', '-c', 'id', 'l2').strip()


def domain(seen: dict, server_id: str) -> dict | None:
    return seen['domains'].get(server_id.upper()) or seen['domains'].get(
        server_id)


def wait_status(cloud, server_id: str, status: str) -> None:
    def reached():
        found = json.loads(cloud.cli('server', 'show', server_id, '-f',
                                     'json'))
        if found['status'] == 'ERROR':
            raise Failure('server %s went to ERROR: %s'
                          % (server_id, found.get('fault')))
        return (found['status'] == status
                and not found.get('OS-EXT-STS:task_state'))
    cloud.wait_for('server %s %s' % (server_id, status), reached,
                   timeout=SLOW)


def guest_sees_its_vf(cloud, l1: L1Compute, server_id: str,
                      what: str) -> tuple[str, str]:
    """Waits until the server's guest runs with one VF that L2 sees.

    In L1: the libvirt domain is running with exactly one hostdev, a VF
    of the igb PF bound to vfio-pci; in L2: its own kernel lists exactly
    one igb VF. Returns (the VF, the PF).
    """
    found = {}

    def sees():
        seen = l1.check()
        guest = domain(seen, server_id)
        found['last'] = seen
        if guest is None or not guest['active']:
            return False
        if (len(guest['hostdevs']) != 1
                or guest['hostdevs'][0] not in seen['vfs']):
            raise Failure('after %s the guest has %s, not one VF of %s'
                          % (what, guest['hostdevs'], seen['vfs']))
        vf = guest['hostdevs'][0]
        if seen['vfs'][vf] != 'vfio-pci' or not guest['l2'] or (
                guest['l2']['igb_vfs'] != 1):
            return False
        found['vf'], found['pf'] = vf, seen['pf']
        return True
    try:
        cloud.wait_for('L2 of %s to see its VF after %s'
                       % (server_id, what), sees, timeout=SLOW,
                       proc=l1.proc)
    except Exception:
        print('NOVA-IN-L1: L1 showed %s' % found.get('last'), flush=True)
        raise
    return found['vf'], found['pf']


def up_computes(cloud) -> set:
    out = subprocess.run(
        [cloud.bin('openstack'), 'compute', 'service', 'list', '--service',
         'nova-compute', '-f', 'value', '-c', 'Host', '-c', 'State'],
        env=cloud.cli_env(), capture_output=True, text=True)
    return {line.split()[0] for line in out.stdout.splitlines()
            if line.endswith(' up')}


def nic_providers(cloud) -> list[dict]:
    """L1's accelerator providers with two CUSTOM_NIC units."""
    found = []
    providers = json.loads(cloud.cli('resource', 'provider', 'list', '-f',
                                     'json'))
    for rp in providers:
        if not rp['name'].startswith(HOST + '_accelerator_'):
            continue
        inventory = json.loads(cloud.cli(
            'resource', 'provider', 'inventory', 'list', rp['uuid'], '-f',
            'json'))
        if any(i['resource_class'] == 'CUSTOM_NIC' and i['total'] == 2
               for i in inventory):
            found.append(rp)
    return found
