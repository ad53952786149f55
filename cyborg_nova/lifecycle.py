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

"""Driver lifecycle on a host: which drivers run, install and uninstall.

``cyborg-nova driver-install`` / ``driver-uninstall`` (the generic-driver
spec's install and uninstall of a driver): the operator's choice is
recorded in the host's state store (nova.conf is never edited) and
overrides ``[cyborg_nova] enabled_drivers``; nova-compute and the agent
pick it up at their next discovery. Installing and uninstalling change
the devices' states, not the devices: the changes made to a device, its
VF count and the settings its driver offers (a QAT device's services),
are :func:`update_vfs` and :func:`update_setting` (``driver-update``).
"""

from __future__ import annotations

import logging

from oslo_config import cfg

from cyborg_drivers import base
from cyborg_drivers import discovery
from cyborg_drivers import loader
from cyborg_nova import providers
from cyborg_nova import store as state_store

LOG = logging.getLogger(__name__)


class LifecycleError(Exception):
    """An operation was refused; the message says why and what to do."""


def effective_names(conf: cfg.ConfigOpts,
                    store: state_store.StateStore | None) -> list[str]:
    """``[cyborg_nova] enabled_drivers`` with the host's installs applied.

    Configured order first (it decides which driver wins a device two
    claim), then drivers installed on the host, by name. Without a store
    (none on this host yet), the configuration alone.
    """
    choices = store.driver_choices() if store is not None else {}
    names = [n for n in conf.cyborg_nova.enabled_drivers
             if choices.get(n, True)]
    names += sorted(n for n, on in choices.items()
                    if on and n not in names)
    return names


def host_drivers(conf: cfg.ConfigOpts,
                 store: state_store.StateStore | None
                 ) -> list[base.AcceleratorDriver]:
    """The drivers in effect on this host (:func:`effective_names`).

    :raises base.DriverError: a driver cannot be loaded.
    """
    return loader.load(conf, effective_names(conf, store))


def host_accelerators(conf: cfg.ConfigOpts,
                      store: state_store.StateStore | None,
                      sysfs_root: str | None = None
                      ) -> discovery.DiscoveryResult:
    """What the drivers in effect on this host find in its sysfs now.

    ``sysfs_root`` defaults to ``[cyborg_nova] sysfs_root``.

    :raises base.DriverError: a driver cannot be loaded or run.
    :raises sysfs.NoSysfs: there is no sysfs to read at the root.
    """
    return discovery.Discoverer(
        host_drivers(conf, store),
        sysfs_root or conf.cyborg_nova.sysfs_root).discover()


def initial_state(conf: cfg.ConfigOpts) -> str:
    """The state a device first seen on this host starts in.

    ``ready`` with ``[cyborg_nova] auto_ready``, else ``inactive``: what
    nova-compute's update and the agent give such a device.
    """
    return (state_store.READY if conf.cyborg_nova.auto_ready
            else state_store.INACTIVE)


def discover_with(conf: cfg.ConfigOpts, name: str
                  ) -> tuple[base.AcceleratorDriver, list]:
    """One driver and what it finds now."""
    (driver,) = loader.load(conf, [name])
    result = discovery.Discoverer(
        [driver], conf.cyborg_nova.sysfs_root).discover()
    if name in result.driver_errors:
        raise LifecycleError('driver %s cannot run: %s'
                             % (name, result.driver_errors[name]))
    return driver, list(result.accelerators)


def install(conf: cfg.ConfigOpts, store: state_store.StateStore,
            nodename: str, name: str) -> list[str]:
    """Enable driver ``name`` and mark its devices ready.

    Nothing is changed on the devices themselves: nova-compute binds a
    function to vfio-pci when a guest gets it, and an SR-IOV device's VFs
    are enabled by :func:`update_vfs`.

    :returns: one line per device saying what was done.
    :raises LifecycleError: unknown driver, or its configuration is
        invalid (nothing is recorded).
    """
    try:
        _, found = discover_with(conf, name)
    except base.DriverError as exc:
        raise LifecycleError(str(exc))
    done = ['%s: ready' % accelerator.address for accelerator in found]
    store.set_driver(name, True)
    store.sync(nodename, found, state_store.INACTIVE)
    for accelerator in found:
        store.set_state(nodename, accelerator.address, state_store.READY,
                        'installed with driver %s' % name)
    LOG.info('Driver %s installed on %s: %d device(s) ready', name,
             nodename, len(found))
    return done


def uninstall(conf: cfg.ConfigOpts, store: state_store.StateStore,
              nodename: str, name: str, allocations_for) -> list[str]:
    """Disable driver ``name`` unless an instance holds one of its devices.

    Its devices are held (fully reserved at Nova's next update), and their
    providers removed by Nova's following updates; nothing is changed on
    the devices themselves (``update_vfs`` to 0 removes VFs).

    :param allocations_for: ``rp_uuid -> {consumer: {...}} | None`` (None:
        Placement cannot say, which refuses the uninstall).
    :raises LifecycleError: a device is in use (the message names the
        consumers, i.e. instances) or Placement cannot tell.
    """
    try:
        _, found = discover_with(conf, name)
    except base.DriverError as exc:
        raise LifecycleError(str(exc))
    for accelerator in found:
        uuid = providers.provider_uuid(nodename, accelerator.address)
        consumers = allocations_for(uuid)
        if consumers is None:
            raise LifecycleError(
                'cannot read the allocations of %s (provider %s) from '
                'Placement; nothing was changed' % (accelerator.address,
                                                    uuid))
        if consumers:
            raise LifecycleError(
                'driver %s is in use: %s is allocated to instance(s) %s; '
                'nothing was changed' % (name, accelerator.address,
                                         ', '.join(sorted(consumers))))
    done = []
    store.sync(nodename, found, state_store.INACTIVE)
    for accelerator in found:
        store.set_state(nodename, accelerator.address, state_store.HELD,
                        'driver %s uninstalled' % name)
        done.append('%s: held' % accelerator.address)
    store.set_driver(name, False)
    LOG.info('Driver %s uninstalled on %s', name, nodename)
    return done


def update_vfs(conf: cfg.ConfigOpts, store: state_store.StateStore,
               nodename: str, name: str, num_vfs: int, allocations_for,
               set_num_vfs, address: str | None = None) -> list[str]:
    """Change the VF count of driver ``name``'s SR-IOV devices.

    Refused while anything holds one of those devices: the kernel changes
    a VF count by removing every VF first. Each device is held while its
    VFs change and gets its state back afterwards; nova-compute reports
    the new total at its next update. Each count written is recorded in
    the store, for nova-compute to write back after a host reboot (see
    :mod:`cyborg_nova.restore`).

    :param set_num_vfs: ``(address, count)``, the privileged write.
    :raises LifecycleError: no such device, in use, or the write failed.
    """
    try:
        driver, found = discover_with(conf, name)
    except base.DriverError as exc:
        raise LifecycleError(str(exc))
    targets = [a for a in found if a.sriov is not None
               and (address is None or a.address == address)]
    if not targets:
        raise LifecycleError('driver %s has no SR-IOV device%s here'
                             % (name, ' at %s' % address if address
                                else ''))
    for accelerator in targets:
        if not 0 <= num_vfs <= accelerator.sriov.total_vfs:
            raise LifecycleError(
                '%d VFs is out of range for %s: 0 to %d (sriov_totalvfs); '
                'nothing was changed' % (num_vfs, accelerator.address,
                                         accelerator.sriov.total_vfs))
        _refuse_in_use(nodename, accelerator, allocations_for,
                       'changing its VF count would remove their VFs')
    # A device first seen here starts as nova-compute would start it.
    rows = store.sync(nodename, targets, initial_state(conf))
    done = []
    for accelerator in targets:
        row = rows[accelerator.address]
        _while_held(store, nodename, accelerator.address, row,
                    'changing the VF count', 'setting %d VFs' % num_vfs,
                    lambda: set_num_vfs(accelerator.address, num_vfs),
                    (ValueError,))
        store.set_vf_count(nodename, accelerator.address, num_vfs)
        store.set_state(nodename, accelerator.address, row.state,
                        row.reason)
        done.append('%s: %d -> %d VFs' % (accelerator.address,
                                          accelerator.sriov.num_vfs,
                                          num_vfs))
    LOG.info('Driver %s on %s: VF counts changed: %s', name, nodename,
             '; '.join(done))
    return done


def update_setting(conf: cfg.ConfigOpts, store: state_store.StateStore,
                   nodename: str, name: str, setting: str, value: str,
                   allocations_for, write,
                   address: str | None = None) -> list[str]:
    """Change ``setting`` of driver ``name``'s devices to ``value``.

    The driver says which of its devices take the setting and whether
    each takes ``value`` now (:meth:`~cyborg_drivers.base.
    AcceleratorDriver.check_setting`; e.g. the kernel takes a QAT
    device's services only while it is down, which also removes its
    VFs). Refused, changing nothing, while any target does not take it
    or is allocated in Placement. Each device is held while it changes
    and gets its state back afterwards.

    :param write: ``(address, value) -> written``, the privileged write
        (:func:`apply_setting` through the privsep daemon).
    :raises LifecycleError: a driver without that setting (the message
        names the drivers with it), no such device, a device that does
        not take the value now or is in use, or the write failed.
    """
    try:
        driver, found = discover_with(conf, name)
    except base.DriverError as exc:
        raise LifecycleError(str(exc))
    if setting not in driver.SETTINGS:
        raise LifecycleError(_no_such_setting(name, setting))
    if address is None:
        targets = [a for a in found if driver.has_setting(a, setting)]
    else:
        targets = [a for a in found if a.address == address]
    if not targets:
        raise LifecycleError('driver %s has no %s here'
                             % (name, 'device at %s' % address if address
                                else 'device with a %s setting' % setting))
    root = conf.cyborg_nova.sysfs_root
    wanted = {}
    for accelerator in targets:
        try:
            wanted[accelerator.address] = driver.check_setting(
                root, accelerator, setting, value)
        except base.DriverError as exc:
            raise LifecycleError(str(exc))
        _refuse_in_use(nodename, accelerator, allocations_for,
                       'its %s cannot change under them' % setting)
    # The privsep daemon's errors; imported here, as the CLI's other
    # commands need none of privsep.
    import privsep
    rows = store.sync(nodename, targets, initial_state(conf))
    done = []
    for accelerator in targets:
        before = driver.read_setting(accelerator, setting)
        row = rows[accelerator.address]
        written = _while_held(
            store, nodename, accelerator.address, row,
            'changing the %s' % setting,
            'setting %s %s' % (setting, value),
            lambda: write(accelerator.address, wanted[accelerator.address]),
            (ValueError, privsep.NotPossible))
        store.set_state(nodename, accelerator.address, row.state,
                        row.reason)
        done.append('%s: %s %s -> %s; bring it up to use them'
                    % (accelerator.address, setting, before or 'none',
                       written))
    LOG.info('Driver %s on %s: %s changed: %s', name, nodename, setting,
             '; '.join(done))
    return done


def apply_setting(conf: cfg.ConfigOpts, name: str, setting: str,
                  address: str, value: str) -> str:
    """Driver ``name``'s own privileged write of ``setting``; written.

    The ``write`` of :func:`update_setting` outside tests.

    :raises base.DriverError: no such driver or setting.
    """
    (driver,) = loader.load(conf, [name])
    return driver.apply_setting(address, setting, value)


def _no_such_setting(name: str, setting: str) -> str:
    """Why driver ``name`` cannot change ``setting``: which drivers can."""
    having = sorted(n for n, cls in loader.installed().items()
                    if setting in cls.SETTINGS)
    if not having:
        return ('no installed driver has a %s setting (asked of %s)'
                % (setting, name))
    return ('the %s setting applies to the %s driver%s only, not %s'
            % (setting, ', '.join(having),
               's' if len(having) > 1 else '', name))


def _while_held(store, nodename: str, address: str, row, reason: str,
                what: str, write, refused: tuple):
    """``write()`` with the device held; what it returned.

    The caller gives the device its state back once done. A refusal
    (one of ``refused``: nothing was written, privsep's InvalidArgument
    is a ValueError) gives it back here; any other failure leaves it
    held, as the device may be half changed.

    :raises LifecycleError: ``write`` was refused or failed; ``what``
        names the change.
    """
    store.set_state(nodename, address, state_store.HELD, reason)
    try:
        return write()
    except refused as exc:
        store.set_state(nodename, address, row.state, row.reason)
        raise LifecycleError('%s on %s refused: %s' % (what, address, exc))
    except Exception as exc:
        raise LifecycleError(
            '%s on %s failed: %s; the device stays held (cyborg-nova '
            'device-set-state to release it)' % (what, address, exc))


def _refuse_in_use(nodename: str, accelerator, allocations_for,
                   why: str) -> None:
    """Refuse a change to a device Placement has allocated (or cannot say).

    :raises LifecycleError: the allocations cannot be read, or some
        instance holds the device; ``why`` says what the change would do.
    """
    uuid = providers.provider_uuid(nodename, accelerator.address)
    consumers = allocations_for(uuid)
    if consumers is None:
        raise LifecycleError(
            'cannot read the allocations of %s from Placement; nothing '
            'was changed' % accelerator.address)
    if consumers:
        raise LifecycleError(
            '%s is in use by instance(s) %s: %s; nothing was changed'
            % (accelerator.address, ', '.join(sorted(consumers)), why))
