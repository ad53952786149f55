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

"""Checking the configuration for what oslo.config lets pass silently.

oslo.config ignores options and groups it does not know, and reads a
value only when the code first asks for it, so a misspelt option, a
misspelt group or a malformed value leaves a host that starts, exits 0
and reports no accelerators, with nothing saying why. :func:`check` reads
the config files itself and returns :class:`Finding` objects for:

- groups that look like ours (they start with ``cyborg``, or are close
  to one of our group names) but are not: ``[cyborg-nova]``;
- options of our groups that do not exist, with the nearest name;
- values of our options that do not parse (``program_timeout = abc``);
- ``[cyborg_nova] enabled_drivers`` names that are not installed, drivers
  that reject their options, drivers that need configuration and have
  none, driver groups set for drivers that are not enabled;
- each driver's own checks of its options (:meth:`~cyborg_drivers.base.
  AcceleratorDriver.check_options`: the NIC mappings, the vGPU types) and
  of what the host offers (:meth:`~cyborg_drivers.base.AcceleratorDriver.
  check_host`);
- an empty or missing ``sysfs_root``, and, by running discovery once,
  enabled drivers that find no device under it and devices discovery
  leaves out.

Only our groups are looked at: nova.conf's own groups (``[DEFAULT]``,
``[libvirt]``, ``[pci]``...) are Nova's business. The host's
``driver-install`` / ``driver-uninstall`` choices (in its state store)
are not applied unless the caller passes the drivers in effect.

Used by ``cyborg-nova config-check``, ``cyborg-nova-status upgrade
check``, and at the start of nova-compute and the agent, which log the
findings (:func:`log_findings`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import glob
import logging
import os
from typing import Iterable, Iterator

from oslo_config import cfg

from cyborg_drivers import base
from cyborg_drivers import discovery
from cyborg_drivers import loader
from cyborg_drivers import sysfs
from cyborg_nova.conf import opts as opts_conf

ERROR, WARNING = 'error', 'warning'
#: The group every host reads.
MAIN_GROUP = 'cyborg_nova'
#: Groups of other projects whose names look like ours: Nova's options
#: for OpenStack Cyborg's API.
FOREIGN_GROUPS = frozenset({'cyborg'})
#: How alike a group name must be to one of ours (difflib's ratio) to be
#: taken for a misspelling of it when it does not start with ``cyborg``.
#: Nova's own group names are at most 0.75 alike to ours
#: (``[conductor]``, ``[cyborg]``).
GROUP_CUTOFF = 0.8
#: How alike a name must be to be offered as "did you mean".
SUGGEST_CUTOFF = 0.6
#: The loggers of discovery, whose lines the findings repeat.
DISCOVERY_LOGGERS = ('cyborg_drivers.discovery', 'cyborg_drivers.sysfs')


@dataclasses.dataclass(frozen=True)
class Finding:
    """One thing wrong with the configuration."""

    #: :data:`ERROR` (the host does not do what the file says) or
    #: :data:`WARNING` (it may, but probably not what was meant).
    severity: str
    #: The group, without brackets; None for what is not in one.
    group: str | None
    #: The option (or command-line option); None for a whole group.
    option: str | None
    message: str

    @property
    def where(self) -> str:
        """``[group] option``, ``[group]`` or the option alone."""
        parts = []
        if self.group is not None:
            parts.append('[%s]' % self.group)
        if self.option is not None:
            parts.append(self.option)
        return ' '.join(parts)

    @property
    def text(self) -> str:
        """The finding without its severity (for a log line's level)."""
        return ('%s: %s' % (self.where, self.message) if self.where
                else self.message)

    def __str__(self) -> str:
        return '%s: %s' % (self.severity, self.text)


def known_options() -> dict[str, dict[str, cfg.Opt]]:
    """``{group: {option: Opt}}``: every option of the project.

    From the ``oslo.config.opts`` entry point's list (the sample config
    and ``oslo-config-validator``'s), the installed drivers' included.
    """
    known: dict[str, dict[str, cfg.Opt]] = {}
    for group, opts in opts_conf.list_opts():
        options = known.setdefault(getattr(group, 'name', group), {})
        for opt in opts:
            options[opt.dest] = opt
    return known


def config_files(conf: cfg.ConfigOpts) -> list[str]:
    """The files ``conf`` was read from, in oslo.config's order.

    ``--config-file`` (or the default files), then the ``*.conf`` of
    ``--config-dir``.
    """
    files = list(getattr(conf, 'config_file', None) or [])
    for directory in [getattr(conf, 'config_dir', None)]:
        if directory:
            files += sorted(glob.glob(os.path.join(directory, '*.conf')))
    return files


def check(conf: cfg.ConfigOpts, files: Iterable[str] | None = None,
          sysfs_root: str | None = None,
          drivers: list[str] | None = None) -> list[Finding]:
    """What is wrong with the configuration of ``conf``.

    :param conf: a parsed ConfigOpts with our options registered
        (:func:`cyborg_nova.conf.register_opts`, or Nova's CONF): its
        values of ``[cyborg_nova]`` and of the driver groups it has
        registered are checked as they are (overrides included); the
        groups it lacks are read from ``files``.
    :param files: the config files to check; default: those ``conf``
        was read from (:func:`config_files`).
    :param sysfs_root: discover under this root instead of ``[cyborg_nova]
        sysfs_root`` (``cyborg-nova config-check --sysfs-root``).
    :param drivers: the drivers in effect; default: ``[cyborg_nova]
        enabled_drivers``.
    """
    return _Checker(conf, files, sysfs_root, drivers).run()


def log_findings(conf: cfg.ConfigOpts, log: logging.Logger,
                 **kwargs) -> list[Finding]:
    """Log each finding of :func:`check` once, at ERROR or WARNING.

    For services at start: a failing check is logged, never raised.
    """
    try:
        findings = check(conf, **kwargs)
    except Exception:
        log.exception('cyborg-nova: the configuration could not be checked')
        return []
    for finding in findings:
        log.log(logging.ERROR if finding.severity == ERROR
                else logging.WARNING, 'cyborg-nova config check: %s',
                finding.text)
    return findings


@contextlib.contextmanager
def quiet_discovery() -> Iterator[None]:
    """Discovery's own log lines off, for a command printing findings.

    Not for services: the level is the process's, whatever the thread.
    """
    levels = {}
    for name in DISCOVERY_LOGGERS:
        logger = logging.getLogger(name)
        levels[name] = logger.level
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def summary(findings: list[Finding], files: list[str]) -> str:
    """``2 errors, 1 warning in nova.conf``, or that there are none."""
    errors = sum(1 for f in findings if f.severity == ERROR)
    warnings = len(findings) - errors
    where = ', '.join(files) or 'no config file (the defaults)'
    if not findings:
        return 'no problems found in %s' % where
    return '%d error%s, %d warning%s in %s' % (
        errors, '' if errors == 1 else 's', warnings,
        '' if warnings == 1 else 's', where)


def _normalize_group(name: str) -> str:
    # As oslo.config: group names are case-insensitive, DEFAULT aside.
    return name if name == 'DEFAULT' else name.lower()


def _near(name: str, candidates: Iterable[str],
          cutoff: float = SUGGEST_CUTOFF) -> str | None:
    found = difflib.get_close_matches(name, sorted(candidates), 1, cutoff)
    return found[0] if found else None


def _strip(message: str, group: str, option: str | None = None) -> str:
    """A driver's message without the ``[group] option:`` it starts with."""
    for prefix in (['[%s] %s: ' % (group, option)] if option else []) + [
            '[%s] ' % group]:
        if message.startswith(prefix):
            return message[len(prefix):]
    return message


def _accepted(known: dict[str, dict[str, cfg.Opt]]) -> dict[str, set[str]]:
    """``{group: option names}`` a file may use: deprecated ones too."""
    accepted: dict[str, set[str]] = {}
    for group, options in known.items():
        names = accepted.setdefault(group, set())
        for opt in options.values():
            names.update((opt.name, opt.dest))
            for old in opt.deprecated_opts:
                accepted.setdefault(old.group or group, set()).add(
                    old.name or opt.dest)
    return accepted


def _registered(conf: cfg.ConfigOpts, group: str) -> bool:
    try:
        return isinstance(conf[group], cfg.ConfigOpts.GroupAttr)
    except (cfg.NoSuchOptError, KeyError, AttributeError):
        return False


class _Checker:
    """One run of :func:`check`."""

    def __init__(self, conf, files, sysfs_root, drivers) -> None:
        self.conf = conf
        self.files = list(files) if files is not None else config_files(
            conf)
        self.sysfs_root = sysfs_root
        self.drivers = drivers
        self.known = known_options()
        self.accepted = _accepted(self.known)
        self.findings: list[Finding] = []
        #: (group, option) -> (raw value, file) as the files set it: the
        #: last one wins, as in oslo.config.
        self.values: dict[tuple[str, str], tuple[str, str]] = {}
        #: Groups of ours set in the files.
        self.present: set[str] = set()
        #: Groups with an option whose value does not parse.
        self.bad_groups: set[str] = set()
        self.private: cfg.ConfigOpts | None = None

    def add(self, severity: str, group: str | None, option: str | None,
            message: str) -> None:
        self.findings.append(Finding(severity, group, option, message))

    def run(self) -> list[Finding]:
        if self._read_files():
            self._read_values()
        if self.private is not None:
            self._check_drivers()
        return self.findings

    # -- names: parsed from the files ----------------------------------------

    def _read_files(self) -> bool:
        """Check the groups and options of each file; all readable?"""
        readable = True
        for path in self.files:
            sections: dict[str, dict[str, list[str]]] = {}
            try:
                cfg.ConfigParser(path, sections).parse()
            except OSError as exc:
                self.add(ERROR, None, None, 'cannot read %s: %s' % (
                    path, exc.strerror or exc))
                readable = False
                continue
            except cfg.ParseError as exc:
                self.add(ERROR, None, None, 'cannot parse %s' % exc)
                readable = False
                continue
            for section, options in sections.items():
                self._check_section(path, _normalize_group(section),
                                    section, options)
        return readable

    def _looks_ours(self, group: str) -> bool:
        if group in FOREIGN_GROUPS or group == 'DEFAULT':
            return False
        return group.startswith('cyborg') or _near(
            group, self.accepted, GROUP_CUTOFF) is not None

    def _check_section(self, path: str, group: str, section: str,
                       options: dict[str, list[str]]) -> None:
        if group in self.accepted:
            self.present.add(group)
            accepted = self.accepted[group]
            for option, values in options.items():
                if option in accepted:
                    if values:
                        self.values[(group, option)] = (values[-1], path)
                    continue
                near = _near(option, accepted)
                self.add(ERROR, group, option,
                         'unknown option (in %s), ignored; %s' % (
                             path, 'did you mean %s?' % near if near else
                             'the group has: %s' % ', '.join(
                                 sorted(self.known.get(group, ())))))
        elif group in FOREIGN_GROUPS:
            for option in options:
                ours = sorted(g for g, opts in self.known.items()
                              if option in opts)
                if ours:
                    self.add(ERROR, section, option,
                             'not an option of this group (in %s): [%s] is '
                             'Nova\'s, for the OpenStack Cyborg service; '
                             'did you mean [%s] %s?' % (
                                 path, section, ours[0], option))
        elif self._looks_ours(group):
            self.add(ERROR, section, None, self._unknown_group(path, group))

    def _unknown_group(self, path: str, group: str) -> str:
        text = 'unknown group (in %s), its options are ignored; ' % path
        name = group[len('cyborg_'):] if group.startswith(
            'cyborg_') else None
        installed = loader.installed()
        if name in installed:
            return text + 'driver %s takes no options' % name
        near = _near(group, self.known)
        if near:
            return text + 'did you mean [%s]?' % near
        return text + 'the groups of cyborg-nova are: %s' % ', '.join(
            '[%s]' % g for g in sorted(self.known))

    # -- values --------------------------------------------------------------

    def _read_values(self) -> None:
        """Parse every value the files set for our options."""
        private = cfg.ConfigOpts()
        for group, options in self.known.items():
            # By name: a module's OptGroup object must not be shared.
            private.register_opts(list(options.values()), group=group)
        try:
            private(args=[], project='cyborg-nova',
                    default_config_files=self.files, default_config_dirs=[],
                    use_env=False)
        except cfg.Error as exc:
            self.add(ERROR, None, None, str(exc))
            return
        self.private = private
        for group, options in sorted(self.known.items()):
            for name, opt in options.items():
                try:
                    private[group][name]
                except ValueError as exc:
                    self.bad_groups.add(group)
                    raw, path = self.values.get((group, name),
                                                (None, None))
                    reason = str(exc).rpartition(' is not valid: ')[2]
                    self.add(ERROR, group, name,
                             'invalid value %r (in %s): %s' % (
                                 raw, path, reason)
                             if path else 'invalid value: %s' % reason)

    def _options(self, group: str):
        """``[group]`` as it is used.

        The caller's if it registered it (its overrides apply), else as
        the files set it.
        """
        if _registered(self.conf, group):
            return self.conf[group]
        return self.private[group]

    def _value(self, group: str, name: str):
        try:
            return self._options(group)[name]
        except ValueError:
            # Reported by _read_values.
            return None

    # -- drivers and discovery -----------------------------------------------

    def _check_drivers(self) -> None:
        installed = loader.installed()
        names = self.drivers
        if names is None:
            names = list(self._value(MAIN_GROUP, 'enabled_drivers') or [])
        usable = []
        for name in names:
            if not name.strip():
                self.add(ERROR, MAIN_GROUP, 'enabled_drivers',
                         'an empty driver name (a stray comma?)')
            elif name not in installed:
                near = _near(name, installed)
                self.add(ERROR, MAIN_GROUP, 'enabled_drivers',
                         'driver %r is not installed%s (installed: %s)' % (
                             name, '; did you mean %s?' % near if near
                             else '', ', '.join(installed) or 'none'))
            elif name not in usable:
                usable.append(name)
        configured = [name for name, cls in installed.items()
                      if cls.group_name() in self.present]
        for name in configured:
            if name not in usable:
                self.add(WARNING, installed[name].group_name(), None,
                         'set, but driver %s is not in [%s] '
                         'enabled_drivers: these options have no effect '
                         '(unless %s is enabled on the host with '
                         '"cyborg-nova driver-install")'
                         % (name, MAIN_GROUP, name))
        running = []
        for name in usable + [n for n in configured if n not in usable]:
            driver = self._load(name)
            if driver is None or name not in usable:
                continue
            if not driver.is_configured():
                self.add(WARNING, driver.group_name(), None,
                         'not configured: driver %s (enabled in [%s] '
                         'enabled_drivers) reports nothing until it is'
                         % (name, MAIN_GROUP))
                continue
            running.append(driver)
        self._discover(running)

    def _problems(self, driver: base.AcceleratorDriver,
                  problems: list[base.ConfigProblem]) -> None:
        group = driver.group_name()
        for problem in problems:
            if not problem.warning:
                self.bad_groups.add(group)
            self.add(WARNING if problem.warning else ERROR, group,
                     problem.option, _strip(problem.message, group,
                                            problem.option))

    def _load(self, name: str) -> base.AcceleratorDriver | None:
        """Driver ``name`` with its options, if they are all valid."""
        group = loader.installed()[name].group_name()
        if group in self.bad_groups:
            return None
        conf = self.conf if _registered(self.conf, group) else self.private
        try:
            (driver,) = loader.load(conf, [name])
            self._problems(driver, driver.check_options())
        except base.DriverError as exc:
            self.bad_groups.add(group)
            self.add(ERROR, group, None, 'driver %s refuses its options: %s'
                     % (name, _strip(str(exc), group)))
            return None
        except ValueError:
            # A value that does not parse: reported by _read_values.
            return None
        return None if group in self.bad_groups else driver

    def _discover(self, drivers: list[base.AcceleratorDriver]) -> None:
        if self.sysfs_root is not None:
            root, group, option = self.sysfs_root, None, '--sysfs-root'
        else:
            root = self._value(MAIN_GROUP, 'sysfs_root')
            group, option = MAIN_GROUP, 'sysfs_root'
        if root is None:
            return
        if not root.strip():
            self.add(ERROR, group, option,
                     'empty: discovery would read bus/pci relative to the '
                     'current directory; leave it unset for /sys')
            return
        try:
            result = discovery.Discoverer(drivers, root).discover()
        except sysfs.NoSysfs as exc:
            self.add(ERROR, group, option, '%s: no accelerator can be '
                     'discovered' % exc)
            return
        found = {a.driver for a in result.accelerators}
        for driver in drivers:
            error = result.driver_errors.get(driver.name)
            group_name = driver.group_name()
            if error:
                self.add(ERROR, group_name, None, 'driver %s found nothing: '
                         '%s' % (driver.name, _strip(error, group_name)))
                continue
            if driver.name not in found:
                self.add(WARNING, MAIN_GROUP, 'enabled_drivers',
                         'driver %s found no device under %s'
                         % (driver.name, root))
            try:
                problems = driver.check_host(root)
            except Exception as exc:
                problems = [base.ConfigProblem(
                    None, 'cannot check what the host offers: %s' % exc,
                    warning=True)]
            self._problems(driver, problems)
        for address, reason in sorted(result.problems.items()):
            self.add(WARNING, None, None, 'discovery leaves %s out: %s'
                     % (address, reason))
