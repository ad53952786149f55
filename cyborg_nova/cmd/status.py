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

"""``cyborg-nova-status upgrade check``: is this compute host ready?

As ``nova-status upgrade check`` (oslo.upgradecheck), run on a compute
host before nova-compute is restarted on new code. Checks:

- the state store (``[cyborg_nova] state_path``): its schema version,
  read through the store's read-only opening (SQLite's ``mode=ro``); the
  store is never created or migrated here;
- the configuration: the findings of :mod:`cyborg_nova.config_check`;
- the Nova release installed, against the range cyborg-nova supports.

Exit status (oslo.upgradecheck's): 0 all passed, 1 a warning, 2 a
failure, 255 the checks could not run (a config file that is missing or
cannot be parsed, an unexpected error).
"""

from __future__ import annotations

from importlib import metadata
import re
import sys

from oslo_config import cfg
from oslo_upgradecheck import upgradecheck

from cyborg_nova import conf as cn_conf
from cyborg_nova import config_check
from cyborg_nova import store as state_store
from cyborg_nova.store import migrations

PROG = 'cyborg-nova-status'
#: The Nova releases cyborg-nova supports, as setup.cfg's ``nova`` extra
#: (``nova>=31.0.0,<35``): major versions NOVA_MIN up to, not including,
#: NOVA_BELOW.
NOVA_MIN, NOVA_BELOW = 31, 35
#: The options oslo.config takes only before the subcommand.
_GLOBAL_OPTIONS = ('--config-file', '--config-dir')

Code = upgradecheck.Code
Result = upgradecheck.Result


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + ('' if text.endswith('.') else '.')


def check_store(path: str) -> Result:
    """The state store at ``path``: current, to be migrated, too new.

    Opened read-only (:mod:`cyborg_nova.store`, SQLite's ``mode=ro``):
    never created, migrated or written here.
    """
    latest = migrations.LATEST
    try:
        state_store.StateStore(path, read_only=True)
    except state_store.StoreMissing:
        return Result(Code.SUCCESS, 'No state store at %s yet: nova-compute '
                      'creates it (schema version %d) when it first starts.'
                      % (path, latest))
    except state_store.StoreTooOld as exc:
        # Expected after an upgrade: the first opening that may write
        # migrates it, in one transaction.
        return Result(Code.SUCCESS, _sentence(str(exc)))
    except state_store.StoreTooNew as exc:
        return Result(Code.FAILURE, _sentence(str(exc)))
    except Exception as exc:
        # Not a database, or this user may not read it.
        return Result(Code.FAILURE, 'The state store %s cannot be read: '
                      '%s; nova-compute cannot report accelerators with it.'
                      % (path, exc))
    return Result(Code.SUCCESS, 'The state store %s has schema version %d, '
                  'the current one.' % (path, latest))


def check_config(conf: cfg.ConfigOpts) -> Result:
    """The findings of :func:`cyborg_nova.config_check.check`."""
    files = config_check.config_files(conf)
    with config_check.quiet_discovery():
        findings = config_check.check(conf, files)
    if not findings:
        return Result(Code.SUCCESS, config_check.summary(findings, files))
    code = (Code.FAILURE if any(f.severity == config_check.ERROR
                                for f in findings) else Code.WARNING)
    return Result(code, '%s: %s' % (
        config_check.summary(findings, files),
        '; '.join(map(str, findings))))


def check_nova() -> Result:
    """The Nova release installed, against the supported range."""
    wanted = 'nova>=%d,<%d' % (NOVA_MIN, NOVA_BELOW)
    try:
        version = metadata.version('nova')
    except metadata.PackageNotFoundError:
        return Result(Code.WARNING, 'Nova is not installed here: this check '
                      'is for compute nodes, where nova-compute loads '
                      'cyborg_nova.LibvirtDriver (%s).' % wanted)
    major = re.match(r'\d+', version)
    if major and NOVA_MIN <= int(major.group()) < NOVA_BELOW:
        return Result(Code.SUCCESS, 'Nova %s (supported: %s).'
                      % (version, wanted))
    return Result(Code.FAILURE, 'Nova %s is installed; this cyborg-nova '
                  'supports %s only.' % (version, wanted))


class Checks(upgradecheck.UpgradeCommands):
    """The checks of ``cyborg-nova-status upgrade check``."""

    display_title = 'cyborg-nova upgrade check results'

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        super().__init__()
        self.conf = conf

    def _store(self) -> Result:
        return check_store(self.conf.cyborg_nova.state_path)

    def _config(self) -> Result:
        return check_config(self.conf)

    def _nova(self) -> Result:
        return check_nova()

    _upgrade_checks = (
        ('State store schema', _store),
        ('Configuration', _config),
        ('Nova release', _nova),
    )


def options_first(argv: list[str]) -> list[str]:
    """``argv`` with ``--config-file``/``--config-dir`` moved first.

    oslo.config takes its global options only before the subcommand;
    ``upgrade check --config-file F`` is accepted as well.
    """
    front, rest = [], []
    args = iter(argv)
    for arg in args:
        if arg in _GLOBAL_OPTIONS:
            front.append(arg)
            front.append(next(args, ''))
        elif arg.startswith(tuple('%s=' % o for o in _GLOBAL_OPTIONS)):
            front.append(arg)
        else:
            rest.append(arg)
    return front + rest


def main(argv: list[str] | None = None) -> int:
    conf = cfg.ConfigOpts()
    cn_conf.register_opts(conf)
    argv = options_first(sys.argv[1:] if argv is None else argv)
    try:
        return upgradecheck.main(
            conf, 'cyborg-nova', Checks(conf), argv,
            default_config_files=cfg.find_config_files(
                project='nova', prog='nova-compute'))
    except cfg.Error as exc:
        print('%s: error: %s' % (PROG, exc), file=sys.stderr)
        return 255


if __name__ == '__main__':
    sys.exit(main())
