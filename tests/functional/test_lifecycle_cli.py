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

"""Driver lifecycle and device state commands against a real Placement."""

import json
import os
import subprocess
import sys
import uuid

import pytest

from cyborg_drivers.fake import hosttree
from cyborg_nova import store as state_store
from tests.functional import placement_fixture

BIN = os.path.dirname(sys.executable)
NODE = 'cn-life'
PAC = '0000:5e:00.0'


@pytest.fixture
def host(tmp_path):
    server = placement_fixture.PlacementServer()
    server.setUp()
    yield make_host(tmp_path, server, 'fpga-host', 'intel_fpga,xilinx_fpga')
    server.cleanUp()


@pytest.fixture
def crypto_host(tmp_path):
    server = placement_fixture.PlacementServer()
    server.setUp()
    yield make_host(tmp_path, server, 'crypto-nic-host', 'intel_qat')
    server.cleanUp()


@pytest.fixture
def qat_host(tmp_path):
    server = placement_fixture.PlacementServer()
    server.setUp()
    yield make_host(tmp_path, server, 'qat-gen4-host', 'intel_qat')
    server.cleanUp()


def make_host(tmp_path, server, profile, drivers, auto_ready=False):
    root = str(tmp_path / 'sys')
    hosttree.build_tree(hosttree.profile_path(profile), root)
    state = str(tmp_path / 'state.sqlite')
    conf = tmp_path / 'nova.conf'
    conf.write_text('[cyborg_nova]\nsysfs_root = %s\nstate_path = %s\n'
                    'enabled_drivers = %s\nauto_ready = %s\n'
                    # The privileged side's own view of sysfs.
                    '[cyborg_nova_privsep]\nsysfs_root = %s\n'
                    % (root, state, drivers, auto_ready, root))

    class Host:
        endpoint = server.endpoint

        def report(self):
            proc = subprocess.run(
                [sys.executable, '-W', 'ignore',
                 os.path.join(placement_fixture.TOOLS, 'report_host.py'),
                 '--placement', server.endpoint, '--nodename', NODE,
                 '--sysfs-root', root, '--state-path', state,
                 '--drivers', drivers],
                capture_output=True, text=True, timeout=120)
            assert proc.returncode == 0, proc.stderr

        def cli(self, *args):
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith('OS_')}
            env.update(server.env())
            proc = subprocess.run(
                [os.path.join(BIN, 'cyborg-nova'), '--config-file',
                 str(conf)] + list(args), capture_output=True, text=True,
                env=env, timeout=60)
            return proc.returncode, proc.stdout, proc.stderr

        def placement(self, method, path, body=None):
            import urllib.request
            req = urllib.request.Request(
                server.endpoint + path, method=method,
                data=json.dumps(body).encode() if body else None,
                headers={'X-Auth-Token': 'admin',
                         'OpenStack-API-Version': 'placement 1.39',
                         'Content-Type': 'application/json'})
            with urllib.request.urlopen(req) as resp:
                text = resp.read()
                return json.loads(text) if text else None

        def providers(self):
            return {rp['name']: rp for rp in self.placement(
                'GET', '/resource_providers')['resource_providers']}

        def inventory(self, address):
            uuid_ = self.providers()['%s_accelerator_%s' % (NODE, address)][
                'uuid']
            return self.placement('GET', '/resource_providers/%s/inventories'
                                  % uuid_)['inventories']
    Host.root = root
    Host.state = state
    return Host()


def test_device_state_and_driver_lifecycle(host):
    host.report()
    rc, out, err = host.cli('device-list', '--nodename', NODE, '-f', 'json')
    assert rc == 0, err
    rows = {r['address']: r for r in json.loads(out)}
    assert set(rows) == {'0000:5e:00.0', '0000:af:00.0', '0000:d8:00.0'}
    assert {r['state'] for r in rows.values()} == {'ready'}
    assert rows[PAC]['present'] is True

    # The operator holds one device: its provider is fully reserved.
    rc, out, err = host.cli('device-set-state', PAC, 'held', '--reason',
                            'maintenance', '--nodename', NODE)
    assert rc == 0, err
    host.report()
    pac = host.providers()['%s_accelerator_%s' % (NODE, PAC)]
    inv = host.placement('GET', '/resource_providers/%s/inventories'
                         % pac['uuid'])['inventories']['FPGA']
    assert inv['reserved'] == inv['total'] == 1
    rc, _, err = host.cli('device-set-state', PAC, 'ready',
                          '--nodename', NODE)
    assert rc == 0, err
    host.report()

    # In use: uninstall refused, naming the instance; nothing changed.
    consumer = str(uuid.uuid4())
    host.placement('PUT', '/allocations/%s' % consumer, {
        'allocations': {pac['uuid']: {'resources': {'FPGA': 1}}},
        'project_id': str(uuid.uuid4()), 'user_id': str(uuid.uuid4()),
        'consumer_generation': None, 'consumer_type': 'INSTANCE'})
    rc, out, err = host.cli('driver-uninstall', 'intel_fpga',
                            '--nodename', NODE)
    assert rc == 1
    assert 'Traceback' not in err
    assert consumer in err and 'is in use' in err
    rc, out, _ = host.cli('device-list', '--nodename', NODE, '-f', 'json')
    assert {r['state'] for r in json.loads(out)} == {'ready'}

    # Free: uninstalled; two updates later no provider of it is left.
    host.placement('DELETE', '/allocations/%s' % consumer)
    rc, out, err = host.cli('driver-uninstall', 'intel_fpga',
                            '--nodename', NODE)
    assert rc == 0, err
    assert 'driver intel_fpga uninstalled' in out
    host.report()
    host.report()
    names = set(host.providers())
    assert names == {NODE, '%s_accelerator_0000:d8:00.0' % NODE}

    # Installed again: ready at once, reported again.
    rc, out, err = host.cli('driver-install', 'intel_fpga',
                            '--nodename', NODE)
    assert rc == 0, err
    assert 'driver intel_fpga installed: 2 device(s) ready' in out
    host.report()
    assert '%s_accelerator_%s' % (NODE, PAC) in host.providers()


def test_service_list_and_bad_input(host):
    rc, out, err = host.cli('service-list', '-f', 'json')
    assert rc == 0, err
    rows = {r['address']: r for r in json.loads(out)}
    assert rows[PAC]['services'] == [
        'function d8424dc4a4a3c413f89e433683f9040b']
    rc, _, err = host.cli('device-set-state', '0000:99:00.0', 'ready',
                          '--nodename', NODE)
    assert rc == 1 and 'no device 0000:99:00.0' in err
    rc, _, err = host.cli('device-set-state', PAC, 'sleepy')
    assert rc == 2 and 'invalid choice' in err
    rc, _, err = host.cli('driver-install', 'warp_drive')
    assert rc == 1 and "unknown driver 'warp_drive'" in err
    assert 'Traceback' not in err


def test_update_driver_changes_vf_count_unless_in_use(crypto_host):
    host = crypto_host
    qat = '0000:70:00.0'
    host.report()
    assert host.inventory(qat)['CUSTOM_QAT']['total'] == 16
    rc, out, err = host.cli('driver-update', 'intel_qat', '--num-vfs', '8',
                            '--device', qat, '--nodename', NODE)
    assert rc == 0, err
    assert '%s: 16 -> 8 VFs' % qat in out
    # Written through the sysfs_admin privsep daemon into the device.
    numvfs = os.path.join(host.root, 'bus', 'pci', 'devices', qat,
                          'sriov_numvfs')
    with open(numvfs) as f:
        assert f.read().strip() == '8'
    # Recorded, for nova-compute to write back after a host reboot.
    store = state_store.StateStore(host.state)
    assert store.vf_counts(NODE) == {qat: 8}
    host.report()
    assert host.inventory(qat)['CUSTOM_QAT']['total'] == 8
    rc, out, _ = host.cli('device-list', '--nodename', NODE, '-f', 'json')
    assert {r['address']: r['state'] for r in json.loads(out)}[qat] == (
        'ready')

    # In use: refused, naming the instance, nothing changed.
    uuid_ = host.providers()['%s_accelerator_%s' % (NODE, qat)]['uuid']
    consumer = str(uuid.uuid4())
    host.placement('PUT', '/allocations/%s' % consumer, {
        'allocations': {uuid_: {'resources': {'CUSTOM_QAT': 1}}},
        'project_id': str(uuid.uuid4()), 'user_id': str(uuid.uuid4()),
        'consumer_generation': None, 'consumer_type': 'INSTANCE'})
    rc, _, err = host.cli('driver-update', 'intel_qat', '--num-vfs', '4',
                          '--device', qat, '--nodename', NODE)
    assert rc == 1 and consumer in err and 'Traceback' not in err
    with open(numvfs) as f:
        assert f.read().strip() == '8'
    # Out of range: refused before anything is held or written.
    host.placement('DELETE', '/allocations/%s' % consumer)
    rc, _, err = host.cli('driver-update', 'intel_qat', '--num-vfs', '99',
                          '--device', qat, '--nodename', NODE)
    assert rc == 1 and 'out of range' in err
    with open(numvfs) as f:
        assert f.read().strip() == '8'
    # Neither refusal changed what is recorded.
    assert store.vf_counts(NODE) == {qat: 8}
    rc, out, _ = host.cli('device-list', '--nodename', NODE, '-f', 'json')
    assert {r['address']: r['state'] for r in json.loads(out)}[qat] == (
        'ready')


def test_install_and_uninstall_change_states_not_devices(crypto_host):
    # Neither runs a driver step on the devices: an SR-IOV PF keeps the
    # VFs it has (driver-update is what changes them).
    host = crypto_host
    qat = '0000:70:00.0'
    numvfs = os.path.join(host.root, 'bus', 'pci', 'devices', qat,
                          'sriov_numvfs')
    with open(numvfs) as f:
        before = f.read()
    host.report()
    rc, out, err = host.cli('driver-install', 'intel_qat', '--nodename',
                            NODE)
    assert rc == 0, err
    assert '%s: ready\n' % qat in out
    rc, out, err = host.cli('driver-uninstall', 'intel_qat', '--nodename',
                            NODE)
    assert rc == 0, err
    assert '%s: held\n' % qat in out
    with open(numvfs) as f:
        assert f.read() == before


@pytest.mark.parametrize('auto_ready, state', [(True, 'ready'),
                                               (False, 'inactive')])
def test_update_driver_on_a_device_nova_has_not_reported(
        tmp_path, auto_ready, state):
    # The first to see the device: it starts as nova-compute's update
    # would start it ([cyborg_nova] auto_ready), and keeps that state
    # once the VF count is changed (seen on a real kernel: a device that
    # driver-update met first stayed inactive, fully reserved, with
    # auto_ready set).
    server = placement_fixture.PlacementServer()
    server.setUp()
    try:
        host = make_host(tmp_path, server, 'crypto-nic-host', 'intel_qat',
                         auto_ready=auto_ready)
        qat = '0000:70:00.0'
        rc, out, err = host.cli('driver-update', 'intel_qat', '--num-vfs',
                                '8', '--device', qat, '--nodename', NODE)
        assert rc == 0, err
        rc, out, _ = host.cli('device-list', '--nodename', NODE, '-f',
                              'json')
        assert {r['address']: r['state']
                for r in json.loads(out)}[qat] == state
        host.report()
        inventory = host.inventory(qat)['CUSTOM_QAT']
        assert inventory['total'] == 8
        assert inventory['reserved'] == (0 if auto_ready else 8)
    finally:
        server.cleanUp()


def test_driver_list_and_discover_enabled_follow_host_choices(host):
    host.report()
    rc, out, err = host.cli('driver-uninstall', 'intel_fpga',
                            '--nodename', NODE)
    assert rc == 0, err
    rc, out, err = host.cli('driver-list', '-f', 'json')
    enabled = {r['name']: r['enabled'] for r in json.loads(out)}
    assert enabled['intel_fpga'] is False
    assert enabled['xilinx_fpga'] is True
    rc, out, err = host.cli('discover', '--enabled', '-f', 'json')
    assert rc == 0, err
    assert [r['driver'] for r in json.loads(out)] == ['xilinx_fpga']


def test_driver_update_sets_qat_services_only_on_a_device_that_is_down(
        qat_host):
    host = qat_host
    qat = '0000:6b:00.0'     # a 4xxx, up, sym;asym
    qat_dir = os.path.join(host.root, 'bus', 'pci', 'devices', qat, 'qat')

    def services():
        with open(os.path.join(qat_dir, 'cfg_services')) as f:
            return f.read().strip()
    host.report()
    assert 'CUSTOM_QAT_SYM' in host.placement(
        'GET', '/resource_providers/%s/traits' % host.providers()[
            '%s_accelerator_%s' % (NODE, qat)]['uuid'])['traits']

    # Up: refused, with how to stop it.
    rc, out, err = host.cli('driver-update', 'intel_qat', '--qat-services',
                            'dc;sym', '--device', qat, '--nodename', NODE)
    assert rc == 1 and 'Traceback' not in err
    assert 'QAT device %s is up' % qat in err
    assert 'echo down > %s' % os.path.join(qat_dir, 'state') in err
    assert services() == 'sym;asym'

    # Services a 4xxx does not take: refused, naming what it takes.
    with open(os.path.join(qat_dir, 'state'), 'w') as f:
        f.write('down\n')
    rc, out, err = host.cli('driver-update', 'intel_qat', '--qat-services',
                            'decomp', '--device', qat, '--nodename', NODE)
    assert rc == 1 and "'decomp' not accepted by a 4XXX" in err
    assert services() == 'sym;asym'

    # Down: written through the sysfs_admin privsep daemon, in the
    # kernel's order.
    rc, out, err = host.cli('driver-update', 'intel_qat', '--qat-services',
                            'dc;sym', '--device', qat, '--nodename', NODE)
    assert rc == 0, err
    assert out == ('%s: services asym;sym -> sym;dc; bring it up to use '
                   'them\n' % qat)
    assert services() == 'sym;dc'

    # In use: refused, naming the instance.
    uuid_ = host.providers()['%s_accelerator_%s' % (NODE, qat)]['uuid']
    consumer = str(uuid.uuid4())
    host.placement('PUT', '/allocations/%s' % consumer, {
        'allocations': {uuid_: {'resources': {'CUSTOM_QAT': 1}}},
        'project_id': str(uuid.uuid4()), 'user_id': str(uuid.uuid4()),
        'consumer_generation': None, 'consumer_type': 'INSTANCE'})
    rc, _, err = host.cli('driver-update', 'intel_qat', '--qat-services',
                          'asym', '--device', qat, '--nodename', NODE)
    assert rc == 1 and consumer in err and 'Traceback' not in err
    assert services() == 'sym;dc'


def test_driver_update_takes_one_change(qat_host):
    rc, _, err = qat_host.cli('driver-update', 'intel_qat', '--num-vfs',
                              '16', '--qat-services', 'dc')
    assert rc == 2 and 'not allowed with argument' in err
    rc, _, err = qat_host.cli('driver-update', 'intel_qat')
    assert rc == 2 and 'one of the arguments --num-vfs --qat-services' in err
    rc, out, _ = qat_host.cli('driver-update', '--help')
    assert rc == 0 and '--qat-services SERVICES' in out


def test_held_units_shown_reserved_and_given_back(crypto_host):
    from cyborg_nova import assignments
    from cyborg_nova import providers as providers_mod

    dc_pf = '0000:70:00.0'
    crypto_host.report()
    store = state_store.StateStore(crypto_host.state)
    rp = providers_mod.provider_uuid(NODE, dc_pf)
    books = assignments.Assignments(store, hold_freed=True)
    units = books.assign('guest-a', rp, ['0000:70:00.%d' % i
                                         for i in range(1, 8)], 2)
    books.release('guest-a', rp)
    crypto_host.report()
    # Held units are reserved in Placement and listed.
    assert crypto_host.inventory(dc_pf)['CUSTOM_QAT']['reserved'] == 2
    rc, out, err = crypto_host.cli('device-list', '--nodename', NODE,
                                   '-f', 'json')
    assert rc == 0, err
    assert {r['address']: r['held_units'] for r in json.loads(out)}[
        dc_pf] == 2
    rc, out, err = crypto_host.cli('device-show', dc_pf, '--nodename', NODE,
                                   '-f', 'json')
    assert rc == 0, err
    shown = json.loads(out)['held_units']
    assert [line.split(' since ')[0] for line in shown] == [
        '%s: scrubbing' % u for u in units]
    # Still being scrubbed: refused, nothing changed.
    rc, out, err = crypto_host.cli('device-set-state', units[0], 'ready',
                                   '--nodename', NODE)
    assert rc == 1
    assert 'Traceback' not in err
    assert 'still being scrubbed' in err
    assert len(store.units.holds()) == 2
    rc, out, err = crypto_host.cli('device-set-state', units[0], 'held',
                                   '--nodename', NODE)
    assert rc == 1
    assert 'can only be marked ready' in err
    # One-time-use (scrubbed, waiting for the operator): given back.
    with store.units.change() as table:
        table.set_hold(rp, units[0], 'used')
    rc, out, err = crypto_host.cli('device-set-state', units[0], 'ready',
                                   '--nodename', NODE)
    assert rc == 0, err
    assert 'unit %s (used) is free again' % units[0] in out
    assert [h.unit for h in store.units.holds()] == [units[1]]
    crypto_host.report()
    assert crypto_host.inventory(dc_pf)['CUSTOM_QAT']['reserved'] == 1
    # Neither a device nor a held unit.
    rc, out, err = crypto_host.cli('device-set-state', units[0], 'ready',
                                   '--nodename', NODE)
    assert rc == 1
    assert 'no device %s' % units[0] in err
