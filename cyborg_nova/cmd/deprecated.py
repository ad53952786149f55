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

"""The old names of renamed commands, kept for one release.

The commands are named noun-verb, as the OpenStack clients name theirs
(``driver-install``, ``instance-attach``, ``whitelist-show``). Each old
name registered in ``setup.cfg`` runs the command of its new name, after
one line on stderr: ``"<old>" is deprecated, use "<new>"``. cliff leaves
them out of ``cyborg-nova --help`` (they are ``deprecated``); ``cyborg-nova
help <old>`` still describes them.
"""

from __future__ import annotations

from cliff import command

from cyborg_nova.cmd import attach
from cyborg_nova.cmd import lifecycle
from cyborg_nova.cmd import whitelist

#: Each old name (as typed: cliff reads ``whitelist_show`` as
#: ``whitelist show``) and its new one.
RENAMED = {
    'install-driver': 'driver-install',
    'uninstall-driver': 'driver-uninstall',
    'update-driver': 'driver-update',
    'attach-instance': 'instance-attach',
    'detach-instance': 'instance-detach',
    'whitelist show': 'whitelist-show',
    'whitelist sync': 'whitelist-sync',
}


def warning(old: str) -> str:
    """The line an old name prints on stderr before its command runs."""
    return '"%s" is deprecated, use "%s"\n' % (old, RENAMED[old])


def alias(cls: type[command.Command], old: str) -> type[command.Command]:
    """Command ``cls`` under its old name ``old``: hidden, and it warns.

    :raises KeyError: ``old`` is not a renamed command's old name.
    """
    new = RENAMED[old]

    class Deprecated(cls):
        __doc__ = '%s (deprecated name of "%s")\n\n%s' % (
            (cls.__doc__ or '').strip().split('\n', 1)[0].rstrip('.'), new,
            'Runs "%s"; this name goes in a later release.' % new)
        deprecated = True

        def run(self, parsed_args):
            self.app.stderr.write(warning(old))
            return super().run(parsed_args)

    Deprecated.__name__ = Deprecated.__qualname__ = '%sDeprecated' % (
        cls.__name__)
    return Deprecated


InstallDriver = alias(lifecycle.DriverInstall, 'install-driver')
UninstallDriver = alias(lifecycle.DriverUninstall, 'uninstall-driver')
UpdateDriver = alias(lifecycle.DriverUpdate, 'update-driver')
AttachInstance = alias(attach.InstanceAttach, 'attach-instance')
DetachInstance = alias(attach.InstanceDetach, 'detach-instance')
WhitelistShow = alias(whitelist.WhitelistShow, 'whitelist show')
WhitelistSync = alias(whitelist.WhitelistSync, 'whitelist sync')
