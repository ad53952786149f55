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

"""Report a host's accelerators to Placement as nova-compute does.

Runs the same code path as the resource tracker's update: Nova's report
client fetches (or creates) the compute node's provider tree, cyborg-nova
adds its accelerator children to Nova's ProviderTree, and the report
client writes what changed. Used by the demo to fill a real Placement
from a host profile without a whole Nova.

Usage: python tools/report_host.py --placement URL --nodename NAME
           --sysfs-root DIR --state-path FILE [--cycles N]
           [--config-file FILE] [--drivers NAME,...]
"""

import argparse
import json
import sys
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
from cyborg_nova import health
from cyborg_nova import lifecycle
from cyborg_nova import providers
from cyborg_nova import store as state_store

ROOT_NAMESPACE = uuid.UUID('2b4c6c1e-8d7a-4f0e-9a55-7d1f6d7e2c11')


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--placement', required=True, help='endpoint URL')
    parser.add_argument('--token', default='admin')
    parser.add_argument('--nodename', required=True)
    parser.add_argument('--sysfs-root', required=True)
    parser.add_argument('--state-path', required=True)
    parser.add_argument('--cycles', type=int, default=1)
    parser.add_argument('--drivers', default='nvidia_gpu,intel_fpga,'
                        'xilinx_fpga,intel_qat',
                        help='drivers to report with, overriding '
                        '[cyborg_nova] enabled_drivers')
    parser.add_argument('--config-file', action='append', default=[],
                        help='nova.conf-style file with the drivers\' '
                        'options (e.g. [cyborg_nic_sriov] '
                        'physical_device_mappings)')
    args = parser.parse_args(argv)

    conf = cfg.ConfigOpts()
    conf(['--config-file=%s' % path for path in args.config_file])
    cn_conf.register_opts(conf)
    sess = session.Session(auth=token_endpoint.Token(args.placement,
                                                     args.token))
    client = report.SchedulerReportClient(adapter=adapter.Adapter(
        sess, service_type='placement', default_microversion='1.39'))
    conf.set_override('enabled_drivers', args.drivers.split(','),
                      group='cyborg_nova')
    store = state_store.StateStore(args.state_path)
    # As nova-compute: the configured drivers, with the host's
    # driver-install / driver-uninstall choices applied.
    names = lifecycle.effective_names(conf, store)
    updater = providers.ProviderTreeUpdater(
        discovery.Discoverer(loader.load(conf, names), args.sysfs_root),
        store,
        lambda rp: client.get_allocations_for_resource_provider(
            ctx, rp).allocations,
        auto_ready=True,
        aer=health.AerHealth(store, health.Policy.from_conf(conf)))
    ctx = context.get_admin_context()
    root_uuid = str(uuid.uuid5(ROOT_NAMESPACE, args.nodename))
    for _ in range(args.cycles):
        tree = client.get_provider_subtree_and_ensure_root(
            ctx, root_uuid, name=args.nodename)
        # What the resource tracker reports for the host itself.
        tree.update_inventory(args.nodename, {
            'VCPU': {'total': 64, 'allocation_ratio': 4.0,
                     'max_unit': 64},
            'MEMORY_MB': {'total': 262144, 'reserved': 4096,
                          'max_unit': 262144},
            'DISK_GB': {'total': 2000, 'max_unit': 2000},
        })
        tree.update_traits(args.nodename, ['COMPUTE_NODE', 'OWNER_NOVA'])
        updater.update(tree, args.nodename)
        client.update_from_provider_tree(ctx, tree)
    print(json.dumps({'root': root_uuid,
                      'providers': tree.get_provider_uuids(args.nodename)}))
    return 0


if __name__ == '__main__':
    sys.exit(main())
