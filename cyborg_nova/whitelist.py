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

"""Keeping Nova's ``[pci] device_spec`` consistent with cyborg-nova.

A PCI function cyborg-nova manages (an accelerator or one of its units)
must not also be matched by Nova's ``[pci] device_spec``: Nova would track
it as a PCI device of its own and could hand it to one instance while
cyborg-nova hands it to another. This module reads device_spec from
Nova's configuration with Nova's own parsing, which the caller passes in
(a :class:`SpecParser`; :class:`cyborg_nova.virt.pci_spec.NovaSpecParser`
is Nova's), matches every managed function against it the way Nova
matches host devices, and builds the drop-in that hands operator-chosen
devices to Nova.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Iterable, Protocol

from oslo_config import cfg

from cyborg_drivers import device as device_model
from cyborg_drivers import discovery
from cyborg_drivers import loader
from cyborg_drivers import names
from cyborg_drivers import sysfs
from cyborg_nova.conf import privsep as privsep_conf
from cyborg_nova import lifecycle
from cyborg_nova import privileged
from cyborg_nova import store as state_store

RESTART_NOTE = ('restart nova-compute on this host: it reads [pci] '
                'device_spec only when it starts')


class WhitelistError(Exception):
    """A conflict or bad input; the message says what and how to fix it."""


class SpecParser(Protocol):
    """Nova's reading of ``[pci] device_spec``."""

    def register_opts(self, conf: cfg.ConfigOpts) -> None:
        """Register Nova's ``[pci]`` options on ``conf``."""

    def parse(self, value: str) -> list:
        """Nova's spec objects for one device_spec value.

        Each has ``.dev_spec_conf`` and ``.match(dev)``.

        :raises ValueError: Nova rejects the value; says why.
        """


@dataclasses.dataclass(frozen=True)
class PciFunctionId:
    """What Nova matches a device_spec entry against."""

    address: str
    vendor_id: str
    product_id: str
    parent_addr: str | None = None

    def dev_dict(self) -> dict:
        """The device dict :meth:`PciDeviceSpec.match` takes."""
        return {'address': self.address, 'vendor_id': self.vendor_id,
                'product_id': self.product_id,
                'parent_addr': self.parent_addr}


@dataclasses.dataclass(frozen=True)
class ManagedFunction(PciFunctionId):
    """A function cyborg-nova manages, and the accelerator it belongs to."""

    accelerator: str = ''
    driver: str = ''

    def describe(self) -> str:
        if self.address == self.accelerator:
            return ('%s (accelerator of driver %s)'
                    % (self.address, self.driver))
        return ('%s (part of accelerator %s, driver %s)'
                % (self.address, self.accelerator, self.driver))


@dataclasses.dataclass(frozen=True)
class SpecEntry:
    """One device_spec entry as Nova parsed it, and where it was written."""

    source: str
    spec: dict
    #: Nova's :class:`PciDeviceSpec` for the entry.
    matcher: object = dataclasses.field(compare=False, repr=False)

    @property
    def text(self) -> str:
        return json.dumps(self.spec, sort_keys=True)

    def describe(self) -> str:
        return '%s (in %s)' % (self.text, self.source)

    def matches(self, function: PciFunctionId) -> bool:
        return bool(self.matcher.match(function.dev_dict()))


@dataclasses.dataclass(frozen=True)
class Conflict:
    entry: SpecEntry
    function: ManagedFunction

    def message(self) -> str:
        return ("Nova's [pci] device_spec entry %s matches %s, which "
                'cyborg-nova manages: a device must have one owner; remove '
                'the entry (or narrow it), or stop cyborg-nova managing '
                'the device' % (self.entry.describe(),
                                self.function.describe()))


def parse_device_spec(parser: SpecParser, values: Iterable[str],
                      source: str) -> list[SpecEntry]:
    """device_spec values (JSON strings) parsed by Nova.

    :raises WhitelistError: Nova rejects a value; names the source.
    """
    entries = []
    for value in values:
        try:
            specs = parser.parse(value)
        except ValueError as exc:
            raise WhitelistError('%s: [pci] device_spec %s: %s'
                                 % (source, value, exc))
        entries.extend(SpecEntry(source, spec.dev_spec_conf, spec)
                       for spec in specs)
    return entries


def read_device_spec(parser: SpecParser,
                     files: Iterable[str]) -> list[SpecEntry]:
    """Every ``[pci] device_spec`` entry of ``files``, file by file.

    Each file is read alone with Nova's option definitions (so deprecated
    names such as ``passthrough_whitelist`` count too), which names the
    file of every entry; Nova reads the same entries, concatenated, from
    all its files. Missing files are skipped.

    :raises WhitelistError: a file or entry Nova would not accept.
    """
    entries = []
    for path in files:
        if not os.path.exists(path):
            continue
        conf = cfg.ConfigOpts()
        parser.register_opts(conf)
        try:
            # No config dirs: only this file, never nova.conf.d behind it.
            conf([], project='nova', default_config_files=[path],
                 default_config_dirs=[])
            values = conf.pci.device_spec
        except cfg.Error as exc:
            raise WhitelistError('%s: %s' % (path, exc))
        entries.extend(parse_device_spec(parser, values, path))
    return entries


def drop_in_path(conf: cfg.ConfigOpts) -> str:
    privsep_conf.register_opts(conf)
    return conf.cyborg_nova_privsep.pci_device_spec_file


def config_files(conf: cfg.ConfigOpts) -> list[str]:
    """The files to read device_spec from.

    The configuration files given, and the drop-in (which nova-compute
    reads with ``--config-dir``).
    """
    files = list(conf.config_file or [])
    drop_in = drop_in_path(conf)
    if drop_in not in files:
        files.append(drop_in)
    return files


def driver_names(conf: cfg.ConfigOpts) -> list[str]:
    """The drivers nova-compute runs on this host.

    ``[cyborg_nova] enabled_drivers`` with the host's driver-install and
    driver-uninstall choices applied; the state store is opened
    read-only, if it exists (neither whitelist command creates, migrates
    or writes it).
    """
    try:
        store = state_store.StateStore(conf.cyborg_nova.state_path,
                                       read_only=True)
    except state_store.StoreMissing:
        return list(conf.cyborg_nova.enabled_drivers)
    return lifecycle.effective_names(conf, store)


def managed_functions(conf: cfg.ConfigOpts, sysfs_root: str,
                      drivers: list[str]
                      ) -> tuple[list[ManagedFunction], dict[str, str]]:
    """Every function the drivers report: accelerators and their units.

    :returns: the functions, and ``driver -> error`` for drivers that
        found nothing this time (their devices are unknown).
    """
    loaded = loader.load(conf, drivers)
    result = discovery.Discoverer(loaded, sysfs_root).discover()
    # Devices that are not on this host's bus (a host profile's) cannot
    # clash with Nova's device_spec.
    elsewhere = {d.name for d in loaded if not d.on_host_bus}
    accelerators = [a for a in result.accelerators
                    if a.driver not in elsewhere]
    wanted = {}
    for acc in accelerators:
        for address in acc.addresses + acc.units:
            if device_model.is_pci_address(address):
                wanted.setdefault(address, acc)
    snapshot = sysfs.PciSnapshot(sysfs_root, only=list(wanted))
    functions = []
    for address, acc in wanted.items():
        found = snapshot.lookup(address)
        if found is not None:
            vendor_id, product_id = found.vendor_id, found.product_id
        else:
            # Unreadable now: the accelerator's ids are the best guess,
            # and matching too much only makes the check stricter.
            vendor_id, product_id = acc.vendor_id, acc.product_id
        functions.append(ManagedFunction(
            address, vendor_id, product_id, snapshot.physfn(address),
            accelerator=acc.address, driver=acc.driver))
    return functions, dict(result.driver_errors)


def host_functions(sysfs_root: str) -> list[PciFunctionId]:
    """Every PCI function on the host's bus."""
    snapshot = sysfs.PciSnapshot(sysfs_root)
    return [PciFunctionId(f.address, f.vendor_id, f.product_id,
                          snapshot.physfn(f.address))
            for f in snapshot]


def conflicts(entries: Iterable[SpecEntry],
              managed: Iterable[ManagedFunction]) -> list[Conflict]:
    managed = list(managed)
    return [Conflict(entry, function) for entry in entries
            for function in managed if entry.matches(function)]


def check(entries: Iterable[SpecEntry],
          managed: Iterable[ManagedFunction]) -> None:
    """:raises WhitelistError: an entry matches a managed function."""
    found = conflicts(entries, managed)
    if found:
        more = ''
        if len(found) > 1:
            more = ('; and %d more conflict(s), see "cyborg-nova '
                    'whitelist-show"' % (len(found) - 1))
        raise WhitelistError(found[0].message() + more)


def parse_passthrough(value: str) -> dict:
    """``ADDRESS[:RESOURCE_CLASS[:TRAIT,...]]`` as a device_spec entry.

    The address is a full PCI address (its own colons included); names
    are normalised as Placement wants them (``CUSTOM_`` added to custom
    ones).

    :raises WhitelistError: not in that form.
    """
    parts = value.split(':')
    address = ':'.join(parts[:3])
    if len(parts) < 3 or len(parts) > 5 or not device_model.is_pci_address(
            address):
        raise WhitelistError(
            '--passthrough %r: expected ADDRESS[:RESOURCE_CLASS'
            '[:TRAIT,...]] with a full PCI address, e.g. '
            '0000:3b:00.0:CUSTOM_NVME:HW_NVME' % value)
    entry: dict = {'address': address}
    if len(parts) > 3 and parts[3]:
        entry['resource_class'] = names.custom_resource_class(parts[3])
    if len(parts) > 4:
        traits = [t for t in parts[4].split(',') if t]
        if traits:
            entry['traits'] = [names.custom_trait(t) for t in traits]
    return entry


def nova_form(entry: dict) -> dict:
    """An entry as it is written to the drop-in (Nova's string values)."""
    out = dict(entry)
    if 'traits' in out:
        out['traits'] = ','.join(out['traits'])
    if 'remote_managed' in out:
        out['remote_managed'] = 'true' if out['remote_managed'] else 'false'
    return out


@dataclasses.dataclass
class SyncPlan:
    """What ``sync`` writes, checked; ``content`` is the drop-in's text."""

    entries: list[dict]
    content: str
    drop_in: str
    #: Things the operator should know but that do not stop the sync.
    warnings: list[str] = dataclasses.field(default_factory=list)


def plan_sync(parser: SpecParser, conf: cfg.ConfigOpts, sysfs_root: str,
              drivers: list[str], passthrough: Iterable[str]) -> SyncPlan:
    """Check everything ``sync`` would write, and render the drop-in.

    :raises WhitelistError: a driver failed (its devices are unknown),
        an existing entry outside the drop-in matches a managed function,
        or a passthrough device is managed, unknown or given twice.
    """
    privsep_nova_conf = privileged.quiet_import('privsep.nova_conf')
    managed, errors = managed_functions(conf, sysfs_root, drivers)
    if errors:
        name, error = sorted(errors.items())[0]
        raise WhitelistError(
            'driver %s found nothing (%s): cannot tell which devices it '
            'manages; fix it or disable it first' % (name, error))
    drop_in = drop_in_path(conf)
    # The drop-in is about to be replaced: only the other files' entries
    # have to agree with cyborg-nova already.
    others = [f for f in config_files(conf) if f != drop_in]
    existing = read_device_spec(parser, others)
    check(existing, managed)

    by_address = {f.address: f for f in managed}
    snapshot = sysfs.PciSnapshot(sysfs_root)
    entries: list[dict] = []
    for value in passthrough:
        entry = parse_passthrough(value)
        address = entry['address']
        if address in by_address:
            raise WhitelistError(
                '--passthrough %s: %s is managed by cyborg-nova; a device '
                'must have one owner' % (value, by_address[address]
                                         .describe()))
        if any(e['address'] == address for e in entries):
            raise WhitelistError('--passthrough %s: %s is given twice'
                                 % (value, address))
        found = snapshot.lookup(address)
        if found is None:
            raise WhitelistError('--passthrough %s: no PCI device %s under '
                                 '%s' % (value, address, sysfs_root))
        # The ids make Nova ignore another card put in the same slot.
        entry.update(vendor_id=found.vendor_id, product_id=found.product_id)
        entries.append({k: entry[k] for k in privsep_nova_conf.KEYS
                        if k in entry})
    written = [nova_form(e) for e in entries]
    # What Nova will read back, through Nova's parser; e.g. a PF address
    # Nova takes as covering its VFs is caught here.
    new = parse_device_spec(parser, [json.dumps(e) for e in written],
                            '--passthrough')
    check(new, managed)
    plan = SyncPlan(entries, privsep_nova_conf.render(written), drop_in)
    for entry in entries:
        function = PciFunctionId(entry['address'], entry['vendor_id'],
                                 entry['product_id'],
                                 snapshot.physfn(entry['address']))
        earlier = [e for e in existing if e.matches(function)]
        if earlier:
            # Nova takes the tags (resource class, traits...) of the
            # first entry that matches a device.
            plan.warnings.append(
                '%s is also matched by %s, which Nova may read first: that '
                "entry's resource class and traits would apply"
                % (entry['address'], earlier[0].describe()))
    return plan


def sync(plan: SyncPlan) -> dict:
    """Write the planned drop-in through the nova_config privsep daemon.

    :returns: what :func:`privsep.nova_conf.write_device_spec` returns.
    """
    privileged.quiet_import('privsep.nova_conf')
    import privsep.nova_conf
    return privsep.nova_conf.write_device_spec(plan.entries)
