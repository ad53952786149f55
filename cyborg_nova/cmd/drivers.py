"""``cyborg-nova driver-list``: the installed accelerator drivers."""

from __future__ import annotations

from cliff import lister

from cyborg_drivers import loader


class DriverList(lister.Lister):
    """List installed accelerator drivers and whether they are enabled.

    Drivers are entry points in the cyborg_nova.drivers namespace;
    "enabled" means listed in [cyborg_nova] enabled_drivers of the config
    read; "needs config" drivers report nothing until their option group
    is filled in.
    """

    def take_action(self, parsed_args):
        enabled = self.app.conf.cyborg_nova.enabled_drivers
        rows = []
        for name, cls in loader.installed().items():
            rows.append((name, name in enabled, cls.needs_config,
                         cls.group_name() if cls.CONFIG_OPTS else '',
                         cls.description))
        return (('name', 'enabled', 'needs_config', 'config_group',
                 'description'), rows)
