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

"""nova-compute's update cycle, repeated: a process to kill and disturb.

Each cycle is what tools/report_host.py does once (Nova's report client
reads the compute node's tree, cyborg-nova updates its accelerator
children, the report client writes what changed). As the resource
tracker's periodic task does, a cycle that raises is logged and the next
one runs at the next period; so this process must never die of a
Placement outage or conflict. One JSON line per cycle on stdout:
``{"cycle": N, "ok": bool, "error": "...", "where": [file:line...],
"seconds": S}`` (``where``: the frames of the error, innermost last).

Usage: update_worker.py --placement URL --nodename NAME --sysfs-root DIR
           --state-path FILE --drivers A,B [--cycles N] [--interval S]
"""

import argparse
import json
import sys
import time
import traceback
import uuid

from keystoneauth1 import adapter
from keystoneauth1 import session
from keystoneauth1 import token_endpoint
from nova import context
from nova.scheduler.client import report
from oslo_config import cfg

from cyborg_drivers import discovery
from cyborg_drivers import loader
from cyborg_nova import conf as cn_conf
from cyborg_nova import lifecycle
from cyborg_nova import providers
from cyborg_nova import store as state_store

# The same root uuid as tools/report_host.py gives a nodename.
ROOT_NAMESPACE = uuid.UUID('2b4c6c1e-8d7a-4f0e-9a55-7d1f6d7e2c11')
HOST_INVENTORY = {
    'VCPU': {'total': 64, 'allocation_ratio': 4.0, 'max_unit': 64},
    'MEMORY_MB': {'total': 262144, 'reserved': 4096, 'max_unit': 262144},
    'DISK_GB': {'total': 2000, 'max_unit': 2000},
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument('--placement', required=True)
    parser.add_argument('--nodename', required=True)
    parser.add_argument('--sysfs-root', required=True)
    parser.add_argument('--state-path', required=True)
    parser.add_argument('--drivers', required=True)
    parser.add_argument('--cycles', type=int, default=0,
                        help='0: until killed')
    parser.add_argument('--interval', type=float, default=0.0)
    args = parser.parse_args(argv)
    conf = cfg.ConfigOpts()
    conf([])
    cn_conf.register_opts(conf)
    conf.set_override('enabled_drivers', args.drivers.split(','),
                      group='cyborg_nova')
    sess = session.Session(auth=token_endpoint.Token(args.placement,
                                                     'admin'), timeout=10)
    # raise_exc=False as the openstacksdk adapter nova-compute gives its
    # report client: it handles 409s (clearing its cache) itself.
    client = report.SchedulerReportClient(adapter=adapter.Adapter(
        sess, service_type='placement', default_microversion='1.39',
        raise_exc=False))
    ctx = context.get_admin_context()
    store = state_store.StateStore(args.state_path)
    root_uuid = str(uuid.uuid5(ROOT_NAMESPACE, args.nodename))
    cycle = 0
    while not args.cycles or cycle < args.cycles:
        cycle += 1
        started = time.monotonic()
        error, where = None, []
        try:
            # Drivers as nova-compute picks them each cycle (the host's
            # driver-install / driver-uninstall choices applied).
            updater = providers.ProviderTreeUpdater(
                discovery.Discoverer(
                    loader.load(conf, lifecycle.effective_names(conf,
                                                                store)),
                    args.sysfs_root), store,
                lambda rp: client.get_allocations_for_resource_provider(
                    ctx, rp).allocations, auto_ready=True)
            tree = client.get_provider_subtree_and_ensure_root(
                ctx, root_uuid, name=args.nodename)
            tree.update_inventory(args.nodename, HOST_INVENTORY)
            tree.update_traits(args.nodename, ['COMPUTE_NODE', 'OWNER_NOVA'])
            updater.update(tree, args.nodename)
            client.update_from_provider_tree(ctx, tree)
        except Exception as exc:
            # What the resource tracker's periodic task does: log it,
            # and the next period tries again.
            error = '%s: %s' % (type(exc).__name__, exc)
            # Where it was raised: Nova's report client failing to reach
            # Placement is expected; cyborg-nova's own code never should.
            where = ['%s:%s' % (f.filename, f.lineno)
                     for f in traceback.extract_tb(exc.__traceback__)]
        print(json.dumps({'cycle': cycle, 'ok': error is None,
                          'error': error, 'where': where,
                          'seconds': time.monotonic() - started}),
              flush=True)
        if args.interval:
            time.sleep(args.interval)
    return 0


if __name__ == '__main__':
    sys.exit(main())
