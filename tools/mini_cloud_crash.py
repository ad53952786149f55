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

"""kill -9 of a real nova-compute under load, in the mini-cloud.

The FPGA host's nova-compute, with a server holding one of its FPGAs, is
killed (SIGKILL to its process group) once as it runs, then ``ROUNDS``
times while it runs its update cycle every second (an extra configuration
file), each time at a random moment after a cycle began. After each kill
the accelerator state store passes SQLite's integrity check. Once the
compute runs again with its own configuration (and DEBUG logging, which
shows its cycles), its providers, their inventories and traits, and the
server's allocations are exactly what they were before the first kill,
and the service is up.
"""

import json
import os
import random
import signal
import sqlite3
import time
import urllib.request

#: Kills while the compute runs its update cycle every second.
ROUNDS = 3
#: What nova-compute's resource tracker logs (at DEBUG) at the end of
#: each cycle.
CYCLE_LINE = 'Final resource view'


class CrashFailure(Exception):
    pass


def placement(cloud, token, path):
    req = urllib.request.Request(
        'http://127.0.0.1:%d%s' % (cloud.port['placement'], path),
        headers={'X-Auth-Token': token,
                 'OpenStack-API-Version': 'placement 1.39'})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def tree_view(cloud, token, host):
    """The host's providers: name -> (inventories, traits, parent)."""
    (root,) = placement(cloud, token, '/resource_providers?name=%s'
                        % host)['resource_providers']
    view = {}
    for rp in placement(cloud, token, '/resource_providers?in_tree=%s'
                        % root['uuid'])['resource_providers']:
        inventories = placement(cloud, token, '/resource_providers/%s/'
                                'inventories' % rp['uuid'])['inventories']
        traits = placement(cloud, token, '/resource_providers/%s/traits'
                           % rp['uuid'])['traits']
        view[rp['name']] = (inventories, sorted(traits),
                            rp['parent_provider_uuid'])
    return view


def allocations(cloud, token, consumer):
    found = placement(cloud, token, '/allocations/%s' % consumer)
    return {rp: alloc['resources']
            for rp, alloc in found['allocations'].items()}


def cycles(log_path):
    """Update cycles the compute's log shows so far."""
    try:
        with open(log_path, errors='replace') as f:
            return f.read().count(CYCLE_LINE)
    except FileNotFoundError:
        return 0


def integrity(path):
    db = sqlite3.connect('file:%s?mode=ro' % path, uri=True)
    try:
        return db.execute('PRAGMA integrity_check').fetchone()[0]
    finally:
        db.close()


def kill(proc):
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def kill_compute(cloud, server_id, rng=None):
    """Kill the FPGA host's nova-compute 1 + ROUNDS times; check; a line.

    ``cloud.computes`` is updated with the process left running.
    :raises CrashFailure: what did not hold.
    """
    rng = rng or random.Random()
    host, profile, conf, agent, proc = cloud.computes[0]
    store = os.path.join(cloud.work, host, 'accelerators.sqlite')
    log_path = os.path.join(cloud.logs, 'nova-%s.log' % host)
    token = cloud.admin_token()
    before = tree_view(cloud, token, host)
    held = allocations(cloud, token, server_id)
    # DEBUG logging shows each cycle's end (CYCLE_LINE).
    debug = cloud.write(host + '-debug.conf', '[DEFAULT]\ndebug = True\n')
    fast = cloud.write(host + '-fast-updates.conf',
                       '[DEFAULT]\nupdate_resources_interval = 1\n')
    started = cycles(log_path)
    for n in range(ROUNDS + 1):
        kill(proc)
        check = integrity(store)
        if check != 'ok':
            raise CrashFailure('state store after kill %d: %s' % (n + 1,
                                                                  check))
        argv = [cloud.bin('nova-compute'), '--config-file', conf,
                '--config-file', debug]
        if n == ROUNDS:
            proc = cloud.start('nova-compute-%s-restarted' % host, argv)
            break
        proc = cloud.start('nova-compute-%s-crash%d' % (host, n + 1),
                           argv + ['--config-file', fast])
        seen = cycles(log_path)
        # Two cycles done: the compute is up and cycling; then a random
        # moment of the next one.
        cloud.wait_for('%s update cycles' % host,
                       lambda: cycles(log_path) >= seen + 2, proc=proc)
        time.sleep(rng.uniform(0.0, 1.0))
    cloud.computes[0] = (host, profile, conf, agent, proc)
    seen = cycles(log_path)
    cloud.wait_for('%s update after the restart' % host,
                   lambda: cycles(log_path) > seen, proc=proc)
    cloud.wait_for_computes()
    after = tree_view(cloud, token, host)
    if after != before:
        changed = sorted(name for name in set(before) | set(after)
                         if before.get(name) != after.get(name))
        raise CrashFailure('providers changed by the kills: %s'
                           % ', '.join(changed))
    if allocations(cloud, token, server_id) != held:
        raise CrashFailure('the allocations of server %s changed'
                           % server_id)
    return ('nova-compute of %s killed %d times (%d while cycling every '
            'second, %d cycles run); state store intact after each; %d '
            'providers, their inventories and traits, and the server\'s '
            'allocations as before'
            % (host, ROUNDS + 1, ROUNDS, cycles(log_path) - started,
               len(after)))
