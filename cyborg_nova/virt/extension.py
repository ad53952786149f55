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

"""The mixin that adds accelerator providers to a Nova virt driver.

Mixed in front of a concrete Nova driver class, it extends
``update_provider_tree``: the wrapped driver reports the compute node as
always, then the accelerators are added as its children. Its
``init_host`` writes back the VF counts a host reboot reset (see
:mod:`cyborg_nova.restore`) and logs what :mod:`cyborg_nova.config_check`
finds wrong in the configuration. Everything is read from Nova's own ``CONF``
(nova.conf), where the ``[cyborg_nova]`` and driver option groups are
registered when the driver is created.
"""

from __future__ import annotations

import json
import logging
import os

import nova.conf
from nova import context as nova_context
from nova import exception
from nova.scheduler.client import report

from cyborg_drivers import bitstreams
from cyborg_drivers import discovery
from cyborg_drivers import loader
from cyborg_nova import conf as cn_conf
from cyborg_nova import config_check
from cyborg_nova import health
from cyborg_nova import lifecycle
from cyborg_nova import notifications
from cyborg_nova import programming
from cyborg_nova import provider_devices
from cyborg_nova import providers
from cyborg_nova import restore
from cyborg_nova import scrub
from cyborg_nova import store as state_store
from cyborg_nova.virt import extra_specs
from cyborg_nova.virt import moves
from cyborg_nova.virt import numa_filter

LOG = logging.getLogger(__name__)
CONF = nova.conf.CONF


class ReportClientAdapter:
    """Nova's Placement report client, called as a keystoneauth adapter.

    What the fencer and the programmer call (``get(url, microversion=,
    json=)`` and the like) goes through the report client's public
    request methods, so Nova's credentials, endpoint and timeouts apply.
    Those never raise on an HTTP error status, which is what the callers'
    ``raise_exc=False`` asks for; ``timeout`` is Nova's ``[placement]``
    one.
    """

    def __init__(self, reportclient: report.SchedulerReportClient) -> None:
        self.reportclient = reportclient

    def get(self, url, microversion=None, **_kwargs):
        return self.reportclient.get(url, version=microversion)

    def delete(self, url, microversion=None, **_kwargs):
        return self.reportclient.delete(url, version=microversion)

    def put(self, url, json=None, microversion=None, **_kwargs):
        return self.reportclient.put(url, json, version=microversion)

    def post(self, url, json=None, microversion=None, **_kwargs):
        return self.reportclient.post(url, json, version=microversion)


class AcceleratorProviderMixin:
    """Reports accelerators as child providers of the compute node."""

    def __init__(self, virtapi, *args, **kwargs) -> None:
        super().__init__(virtapi, *args, **kwargs)
        cn_conf.register_opts(CONF)
        self._accelerator_updater: providers.ProviderTreeUpdater | None = (
            None)
        self._accelerator_store: state_store.StateStore | None = None
        self._store_keeper = None
        self._driver_names: list[str] = []
        self._accelerator_programmer: programming.Programmer | None = None
        self._compute_notifier: notifications.Notifier | None = None
        self._placement_adapter: ReportClientAdapter | None = None
        # The privileged VF count write; Nova's functional tests, which
        # have no privsep daemon, put a fake kernel's write here.
        self._set_num_vfs: restore.SetNumVfs = _privileged_set_num_vfs

    def _updater(self) -> providers.ProviderTreeUpdater:
        opts = CONF.cyborg_nova
        if self._accelerator_store is None:
            self._accelerator_store = state_store.StateStore(
                opts.state_path)
            # One idle connection for the life of the service: a cycle
            # or a guest build opens many short ones, and without it the
            # close of each would checkpoint (and sync) the WAL.
            self._store_keeper = self._accelerator_store.keep_open()
        # Drivers installed or uninstalled on the host since the last
        # update take effect now, without a restart.
        names = lifecycle.effective_names(CONF, self._accelerator_store)
        if self._accelerator_updater is None or names != self._driver_names:
            drivers = loader.load(CONF, names)
            LOG.info('cyborg-nova: accelerator drivers %s over %s, state '
                     'in %s', ', '.join(names) or 'none', opts.sysfs_root,
                     opts.state_path)
            self._accelerator_updater = providers.ProviderTreeUpdater(
                discovery.Discoverer(drivers, opts.sysfs_root),
                self._accelerator_store, _placement_allocations,
                auto_ready=opts.auto_ready,
                aer=health.AerHealth(
                    self._accelerator_store, health.Policy.from_conf(CONF),
                    self._notifier()),
                one_time_use=lambda acc: scrub.one_time_use(CONF, acc))
            self._driver_names = names
        return self._accelerator_updater

    def _sysfs_root(self) -> str:
        """The sysfs this driver reads, bound when its updater was made."""
        return self._updater().discoverer.sysfs_root

    def _our_nodes(self) -> list[str]:
        return list(self.get_available_nodes(refresh=False))

    def _our_providers(self, nodes=None) -> dict[str, tuple[str, str]]:
        """{provider uuid: (nodename, address)} of this host's devices.

        Those of out-of-process drivers (:mod:`cyborg_nova.
        remote_devices`) included, under their own provider uuids. This,
        never ``instance.node`` (which names the source host until an
        evacuation's spawn is done), says which providers are this
        host's.
        """
        store = self._updater().store
        return {rp: (node, address)
                for node in (nodes or self._our_nodes())
                for rp, address in provider_devices.known(store,
                                                          node).items()}

    def get_available_resource(self, nodename):
        data = super().get_available_resource(nodename)
        try:
            nodes = self._accelerator_numa_nodes(nodename)
        except Exception:
            # The scheduler then fits this host as Nova's own filter does.
            LOG.exception('cyborg-nova: the NUMA nodes of %s\'s '
                          'accelerators are not reported this cycle',
                          nodename)
            return data
        data['stats'] = dict(data.get('stats') or {})
        data['stats'][numa_filter.STATS_KEY] = json.dumps(
            nodes, sort_keys=True)
        return data

    def _accelerator_numa_nodes(self, nodename: str
                                ) -> dict[str, int | None]:
        """{provider uuid: NUMA node} of the host's accelerators.

        As the last update recorded them (Nova asks for the resources
        before it updates the provider tree); at the first update after
        a start with an empty store, as a discovery finds them now.
        """
        updater = self._updater()
        found = provider_devices.recorded(updater.store, [nodename]).devices
        if found:
            return {rp: device.accelerator.numa_node
                    for rp, device in found.items()}
        return {providers.provider_uuid(nodename, accelerator.address):
                accelerator.numa_node
                for accelerator in updater.discoverer.discover()
                .accelerators}

    def update_provider_tree(self, provider_tree, nodename,
                             allocations=None):
        super().update_provider_tree(provider_tree, nodename,
                                     allocations=allocations)
        try:
            self._updater().update(provider_tree, nodename, allocations)
        except Exception:
            # Leave the accelerator providers as Placement has them: a
            # discovery failure must not take the host's compute
            # resources (reported above) down with it, nor remove
            # providers instances may be using.
            LOG.exception('cyborg-nova: accelerator providers of %s not '
                          'updated this cycle', nodename)

    # -- VFs back after a host reboot ----------------------------------------

    def init_host(self, host):
        super().init_host(host)
        # Nova calls this before it resumes the host's guests
        # (_init_instance) and before the first update of the provider
        # tree: the guests' VFs must exist by then, and the first report
        # must show the restored totals, not an empty PF.
        try:
            self._restore_vfs()
        except Exception:
            # A host that cannot restore VFs still runs its other guests.
            LOG.exception('cyborg-nova: VF counts not restored; starting '
                          'without them')
        # Once per start: what nova.conf gets wrong and oslo.config lets
        # pass (a misspelt option, a driver that finds nothing), logged
        # and never fatal.
        config_check.log_findings(CONF, LOG)

    def _restore_vfs(self) -> None:
        opts = CONF.cyborg_nova
        if self._accelerator_store is None:
            if not os.path.exists(opts.state_path):
                return  # no store, so nothing recorded
            self._accelerator_store = state_store.StateStore(
                opts.state_path)
        store = self._accelerator_store
        # The wrapped driver's init_host (above) made its nodes known:
        # the fake drivers set them there, libvirt asks its now open
        # connection for the hypervisor hostname. Nova's own node lookup
        # right after init_host is built on the same names, and they are
        # the nodenames of the updates (and of driver-update's
        # --nodename), so the store's rows are found under them.
        for nodename in self.get_available_nodes(refresh=False) or ():
            if not store.vf_counts(nodename):
                continue
            outcomes = restore.restore_vfs(
                store, nodename, opts.sysfs_root, self._set_num_vfs,
                _placement_allocations)
            LOG.info('cyborg-nova: VF counts of %s after start: %s',
                     nodename, ', '.join('%s %s' % (o.address, o.action)
                                         for o in outcomes))

    # -- what the extension's own writers share -----------------------------

    def _notifier(self) -> notifications.Notifier:
        """This nova-compute's sender of accelerator notifications."""
        if self._compute_notifier is None:
            self._compute_notifier = notifications.Notifier(
                CONF, 'cyborg-nova-compute.%s' % CONF.host)
        return self._compute_notifier

    def _placement(self) -> ReportClientAdapter:
        """Placement through Nova's report client, for ``reserved`` writes."""
        if self._placement_adapter is None:
            self._placement_adapter = ReportClientAdapter(
                report.report_client_singleton())
        return self._placement_adapter

    # -- program on spawn ----------------------------------------------------

    def _programmer(self) -> programming.Programmer:
        if self._accelerator_programmer is None:
            self._updater()
            self._accelerator_programmer = programming.Programmer(
                CONF, self._accelerator_store, self._placement(),
                lambda: self._updater().discoverer.drivers,
                self._sysfs_root(), notifier=self._notifier())
            # Jobs a killed nova-compute left behind (the agent would
            # finish them too; whoever comes first holds the job's lock).
            for job in self._accelerator_programmer.recover():
                LOG.warning('cyborg-nova: finished the interrupted '
                            'programming job %s of %s: %s', job.id,
                            job.address, job.status)
        return self._accelerator_programmer

    def _program_for_instance(self, instance, allocations) -> None:
        """Load the flavor's ``cyborg_nova:bitstream`` into its FPGAs here.

        The FPGAs are those of this host's providers (:meth:`
        _our_providers`) that ``allocations``, the instance's allocations
        as Nova passes them to spawn or finish_migration, hold; never
        found through ``instance.node``, which during an evacuation
        still names the source host. The instance's allocation of each
        FPGA is the lock: nobody else can be placed on it, so
        programming only excludes other consumers (the programmer proves
        in Placement that the instance alone holds the provider). FPGAs
        that already have the function are left alone.

        :raises nova.exception.ComputeResourcesUnavailable: the bitstream
            is unknown or does not fit, the instance holds no FPGA here,
            or programming failed (the device stays fenced as failed);
            Nova reschedules a build, and puts a move it cannot finish in
            ERROR on this host.
        """
        name = (instance.flavor.extra_specs or {}).get(
            extra_specs.BITSTREAM)
        if not name:
            return
        programmer = self._programmer()

        def unavailable(reason):
            LOG.error('cyborg-nova: instance %s: %s', instance.uuid, reason)
            return exception.ComputeResourcesUnavailable(reason=reason)
        try:
            header = bitstreams.load(programmer.bitstream_dir,
                                     programmer.library_file(name))[1]
        except (programming.Refused, bitstreams.BadName,
                bitstreams.NotFound, bitstreams.InvalidBitstream) as exc:
            raise unavailable('bitstream %s of the flavor: %s' % (name, exc))
        ours = self._our_providers()
        found = self._updater().discoverer.discover().by_address()
        held = []
        for rp, alloc in sorted((allocations or {}).items()):
            if rp not in ours:
                continue
            node, address = ours[rp]
            acc = found.get(address)
            if (acc is not None and acc.fpga_regions
                    and providers.provider_uuid(node, address) == rp
                    and alloc.get('resources', {}).get(acc.resource_class)):
                held.append((node, acc))
        if not held:
            raise unavailable('the flavor asks for bitstream %s but the '
                              'instance holds no FPGA on this host (%s)'
                              % (name, ', '.join(self._our_nodes())))
        for node, acc in held:
            if any(r.function_id == header.function_id
                   for r in acc.fpga_regions
                   if r.interface_id == header.interface_id):
                LOG.info('cyborg-nova: instance %s: %s already has '
                         'bitstream %s loaded', instance.uuid, acc.address,
                         name)
                continue
            try:
                job = programmer.program(node, acc.address, name,
                                         consumer=instance.uuid)
            except programming.Refused as exc:
                raise unavailable('cannot program %s with %s: %s'
                                  % (acc.address, name, exc))
            if job.status != programming.SUCCEEDED:
                raise unavailable('programming %s with %s failed (job %s):'
                                  ' %s' % (acc.address, name, job.id,
                                           job.error))
            LOG.info('cyborg-nova: instance %s: programmed %s with %s '
                     '(job %s)', instance.uuid, acc.address, name, job.id)

    def spawn(self, context, instance, image_meta, injected_files,
              admin_password, allocations, *args, **kwargs):
        # Every build, and evacuate, rebuild and unshelve, which Nova's
        # libvirt driver does through spawn.
        self._program_for_instance(instance, allocations)
        return super().spawn(context, instance, image_meta, injected_files,
                             admin_password, allocations, *args, **kwargs)

    def finish_migration(self, context, migration, instance, disk_info,
                         network_info, image_meta, resize_instance,
                         allocations, *args, **kwargs):
        # Cold migrate and resize: the libvirt driver builds the guest
        # on the destination here, not in spawn. A revert goes back to
        # the source's FPGAs as they were (finish_revert_migration).
        self._program_for_instance(instance, allocations)
        return super().finish_migration(
            context, migration, instance, disk_info, network_info,
            image_meta, resize_instance, allocations, *args, **kwargs)


def _privileged_set_num_vfs(address: str, count: int) -> int:
    # Imported on use: the sysfs_admin daemon is started only on a host
    # with VF counts to write back.
    from privsep import pci
    return pci.set_num_vfs(address, count)


def _placement_allocations(rp_uuid: str) -> dict | None:
    """The consumers of a provider, through Nova's own Placement client."""
    return moves.provider_allocations(nova_context.get_admin_context(),
                                      rp_uuid)
