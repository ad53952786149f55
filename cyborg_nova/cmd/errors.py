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

"""One-line errors of the commands and services: config, drivers, hosts.

An operator's mistake ends a command or a service with one line on
stderr saying what is wrong and how to fix it, and a non-zero status:

* a bad option value (oslo.config finds it only when the option is read)
  is found at start by :func:`check_values`, which names the file, the
  group, the option and the value (:class:`BadValue`);
* a driver that fails during a command's discovery is reported once,
  by the command (:class:`CommandOutcome`), which then exits 1;
* a ``--nodename`` the host's state store has no devices of is refused,
  with the names this host's devices are recorded under
  (:func:`require_host`);
* a usage error (a missing or empty argument) is one line too, without
  the usage (:func:`one_line_usage`).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import logging
import os
import socket
from typing import Iterator

from cliff import lister
from oslo_config import cfg
from oslo_config import types

from cyborg_drivers import discovery
from cyborg_nova.conf import agent as agent_conf
from cyborg_nova import lifecycle

#: The exit status of a service given a bad config file or value.
CONFIG_ERROR = 2


class BadValue(cfg.Error):
    """An option whose value oslo.config cannot take; one line."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.msg = message


class ConfigError(cfg.Error):
    """A config file that cannot be read, said with how to fix it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.msg = message


def explained(exc: cfg.Error) -> cfg.Error:
    """``exc`` with a hint at the fix, where oslo.config gives none."""
    text = ' '.join(str(exc).split())
    if isinstance(exc, cfg.ConfigFilesNotFoundError):
        return ConfigError('%s (check the --config-file paths)' % text)
    if isinstance(exc, cfg.ConfigFilesPermissionDeniedError):
        return ConfigError('%s (this user cannot read them)' % text)
    if isinstance(exc, cfg.ConfigFileParseError):
        return ConfigError('%s (every option goes under a [group] line, '
                           'as "name = value")' % text)
    return exc


def _files(conf: cfg.ConfigOpts) -> list[str]:
    """The config files read, the one whose values win last."""
    files = list(conf.get('config_file') or [])
    for folder in conf.get('config_dir') or []:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        files += [os.path.join(folder, n) for n in names
                  if n.endswith('.conf')]
    return files


def _raw(conf: cfg.ConfigOpts, group: str, name: str
         ) -> tuple[str, str] | None:
    """(file, text) of the value of ``[group] name`` that was read."""
    for path in reversed(_files(conf)):
        sections: dict = {}
        try:
            cfg.ConfigParser(path, sections).parse()
        except (OSError, cfg.ParseError):
            continue
        options = sections.get(group, {})
        for key in (name, name.replace('_', '-')):
            if options.get(key):
                return path, ' '.join(options[key][-1].split())
    return None


def _opt(conf: cfg.ConfigOpts, group: str | None, name: str):
    try:
        # oslo.config has no public way from a name to its Opt.
        return conf._get_opt_info(name, group)['opt']
    except (cfg.NoSuchOptError, cfg.NoSuchGroupError, KeyError,
            AttributeError):
        return None


def _why(opt, reason: str) -> str:
    """oslo.config's reason, without Python's words for a bad number."""
    if reason.startswith('(') and reason.endswith(')'):
        # A ValueError of several arguments (a URI's): the first says it.
        try:
            first = ast.literal_eval(reason)[0]
        except (ValueError, SyntaxError, TypeError, IndexError):
            first = None
        if isinstance(first, str):
            reason = first
    kind = getattr(opt, 'type', None)
    if isinstance(kind, types.Integer) and 'invalid literal' in reason:
        return 'not an integer'
    if isinstance(kind, types.Float) and 'could not convert' in reason:
        return 'not a number'
    return reason


def _default(opt) -> str:
    default = getattr(opt, 'default', None)
    if default is None or default == '' or default == []:
        return ''
    if isinstance(default, (list, tuple)):
        default = ','.join(str(d) for d in default)
    return ' (%s)' % default


def bad_value(conf: cfg.ConfigOpts, group: str | None, name: str,
              exc: cfg.ConfigSourceValueError) -> BadValue:
    """The one-line error of ``[group] name``, which raised ``exc``."""
    section = group or 'DEFAULT'
    opt = _opt(conf, group, name)
    reason = str(exc).split(' is not valid: ', 1)[-1]
    why = _why(opt, reason)
    found = _raw(conf, section, name)
    if found is None:
        return BadValue('[%s] %s: %s; fix the value where it is set'
                        % (section, name, why))
    path, text = found
    return BadValue('%s: [%s] %s = %r is not valid: %s; fix it, or remove '
                    'the line for the default%s'
                    % (path, section, name, text, why, _default(opt)))


def check_values(conf: cfg.ConfigOpts) -> cfg.ConfigOpts:
    """``conf``, once every option registered so far was read.

    oslo.config converts a value only when it is read: reading them all
    now makes a bad one an error at start, not a traceback later.

    :raises BadValue: the first option whose value is not valid.
    """
    for key in list(conf):
        try:
            value = conf[key]
        except cfg.ConfigSourceValueError as exc:
            raise bad_value(conf, None, key, exc) from exc
        if not isinstance(value, cfg.ConfigOpts.GroupAttr):
            continue
        for name in list(value):
            try:
                value[name]
            except cfg.ConfigSourceValueError as exc:
                raise bad_value(conf, key, name, exc) from exc
    return conf


def described(conf: cfg.ConfigOpts | None,
              exc: cfg.ConfigSourceValueError) -> cfg.Error:
    """The one-line error of a bad value oslo.config raised on reading.

    The error does not say which group the option is in: every option
    registered by now is read again to find it.
    """
    if conf is not None:
        try:
            check_values(conf)
        except BadValue as found:
            return found
    return exc


def one_line_usage(parser: argparse.ArgumentParser
                   ) -> argparse.ArgumentParser:
    """``parser``, its usage errors on one line; exit status 2.

    ``<prog>: error: <message> (see "<prog> --help")``: argparse would
    print the whole usage first.
    """
    def error(message: str):
        parser.exit(2, '%s: error: %s (see "%s --help")\n'
                    % (parser.prog, message, parser.prog))
    parser.error = error  # type: ignore[method-assign]
    return parser


# -- drivers failing during a command's discovery -----------------------------

class _DriverFailures(logging.Filter):
    """Takes discovery's log of each failed driver off the console."""

    def __init__(self, show: bool) -> None:
        super().__init__()
        self.show = show
        self.failures: dict[str, str] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        failure = getattr(record, 'driver_failure', None)
        if failure is None:
            return True
        name, reason = failure
        self.failures.setdefault(name, reason)
        return self.show


@contextlib.contextmanager
def driver_failures(show_log: bool = False) -> Iterator[dict[str, str]]:
    """``driver -> reason`` of the drivers that fail in the block.

    Their log records are kept off the console (unless ``show_log``,
    e.g. with ``--debug``): the caller reports each failure once.
    """
    failures = _DriverFailures(show_log)
    discovery.LOG.addFilter(failures)
    try:
        yield failures.failures
    finally:
        discovery.LOG.removeFilter(failures)


class CommandOutcome:
    """How a ``cyborg-nova`` command ends: the exit status, one line each.

    * A bad value of an option read during the command: one line
      naming the file, group, option and value (:class:`BadValue`).
    * A driver that failed during the command's discovery: one line,
      ``error: driver <name>: <reason>``, after the output; the status
      is then 1 (``warning:`` and the status unchanged where
      :attr:`driver_failures_fail` is false). A command that fails for
      that reason itself (e.g. ``driver-install`` of that driver) says
      it once, in its own error.
    * :attr:`failed` set by the command: the status is 1.
    * A listing with no rows prints no blank table; the command says on
      stderr why it is empty.
    """

    #: Whether a driver failing during discovery makes the status 1.
    driver_failures_fail = True
    #: Added to each failed driver's line, e.g. what it leaves undone.
    driver_failure_note = ''
    #: Set by a command whose output reports a failure: the status is 1.
    failed = False

    def get_parser(self, prog_name):
        return one_line_usage(super().get_parser(prog_name))

    def run(self, parsed_args):
        debug = bool(getattr(getattr(self.app, 'options', None), 'debug',
                             False))
        with driver_failures(show_log=debug) as failures:
            try:
                status = super().run(parsed_args)
            except cfg.ConfigSourceValueError as exc:
                raise described(_conf(self.app), exc) from exc
        level = 'error' if self.driver_failures_fail else 'warning'
        for name, reason in sorted(failures.items()):
            self.app.stderr.write('%s: driver %s: %s%s\n'
                                  % (level, name, reason,
                                     self.driver_failure_note))
        if self.failed or (failures and self.driver_failures_fail):
            return 1
        return status

    def produce_output(self, parsed_args, column_names, data):
        if isinstance(self, lister.Lister):
            data = list(data)
            if (not data and getattr(parsed_args, 'formatter', '') == 'table'
                    and not getattr(parsed_args, 'print_empty', False)):
                return 0
        return super().produce_output(parsed_args, column_names, data)


def _conf(app) -> cfg.ConfigOpts | None:
    """The command's config, as ``hostargs.conf``; None if it has none."""
    conf = getattr(app, 'conf', None)
    if conf is not None:
        return conf
    try:
        # Under ``openstack``: the plugin's "client" is the config.
        return app.client_manager.cyborg_nova
    except Exception:
        return None


# -- hosts --------------------------------------------------------------------

def this_host_names(conf: cfg.ConfigOpts) -> list[str]:
    """The names this host's devices may be recorded under.

    The host name (``--nodename``'s default), without its domain too, and
    the agent's ``[cyborg_agent] nodename``; in that order, once each.
    """
    name = socket.gethostname()
    names = [name, name.split('.')[0]]
    if 'cyborg_agent' not in conf:
        agent_conf.register_opts(conf)
    names.append(conf.cyborg_agent.nodename)
    return list(dict.fromkeys(n for n in names if n))


def host_hint(conf: cfg.ConfigOpts, store, nodename: str) -> str | None:
    """Why the store may have no devices of ``nodename``; None: no mistake.

    None when the store has devices of ``nodename``, or when it is one
    of this host's names and the store has no devices of any node (the
    host has none recorded yet). Else: the nodes the store has devices
    of, or that ``nodename`` is not this host.
    """
    if store is not None and store.devices(nodename):
        return None
    names = this_host_names(conf)
    known = [n for n in store.nodenames() if n != nodename] if store else []
    if known:
        return 'known hosts: %s (give one with --nodename)' % ', '.join(
            known)
    if nodename not in names:
        return ('%s is not this host (%s): give this host\'s hypervisor '
                'hostname with --nodename' % (nodename, names[0]))
    return None


def require_host(conf: cfg.ConfigOpts, store, nodename: str) -> None:
    """Refuse a ``nodename`` :func:`host_hint` finds a mistake.

    :raises lifecycle.LifecycleError: ``no devices recorded for host
        <nodename>; <hint>``.
    """
    hint = host_hint(conf, store, nodename)
    if hint:
        raise lifecycle.LifecycleError('no devices recorded for host %s; %s'
                                       % (nodename, hint))
