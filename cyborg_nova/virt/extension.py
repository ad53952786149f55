"""The mixin that adds accelerator providers to a Nova virt driver.

Mixed in front of a concrete Nova driver class, it extends
``update_provider_tree``: the wrapped driver reports the compute node as
always, then the accelerators are added as its children. Everything is
read from Nova's own ``CONF`` (nova.conf), where the ``[cyborg_nova]``
and driver option groups are registered when the driver is created.
"""

from __future__ import annotations

import logging

import nova.conf
from nova import context as nova_context
from nova.scheduler.client import report

from cyborg_drivers import discovery
from cyborg_drivers import loader
from cyborg_nova import conf as cn_conf
from cyborg_nova import lifecycle
from cyborg_nova import providers
from cyborg_nova import state as state_store

LOG = logging.getLogger(__name__)
CONF = nova.conf.CONF


class AcceleratorProviderMixin:
    """Reports accelerators as child providers of the compute node."""

    def __init__(self, virtapi, *args, **kwargs) -> None:
        super().__init__(virtapi, *args, **kwargs)
        cn_conf.register_opts(CONF)
        self._accelerator_updater: providers.ProviderTreeUpdater | None = (
            None)
        self._accelerator_store: state_store.StateStore | None = None
        self._driver_names: list[str] = []

    def _updater(self) -> providers.ProviderTreeUpdater:
        opts = CONF.cyborg_nova
        if self._accelerator_store is None:
            self._accelerator_store = state_store.StateStore(
                opts.state_path)
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
                auto_ready=opts.auto_ready)
            self._driver_names = names
        return self._accelerator_updater

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


def _placement_allocations(rp_uuid: str) -> dict | None:
    """The consumers of a provider, through Nova's own Placement client."""
    try:
        info = report.report_client_singleton(
        ).get_allocations_for_resource_provider(
            nova_context.get_admin_context(), rp_uuid)
    except Exception as exc:
        LOG.warning('cyborg-nova: cannot read allocations of provider %s: '
                    '%s', rp_uuid, exc)
        return None
    return info.allocations
