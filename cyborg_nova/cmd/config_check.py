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

"""``cyborg-nova config-check``: what oslo.config lets pass silently."""

from __future__ import annotations

import argparse

from cliff import command

from cyborg_nova.cmd import hostargs
from cyborg_nova import config_check


def nonempty(value: str) -> str:
    """An argparse type: a path that is not the empty string.

    oslo.config and the commands take an empty ``--sysfs-root`` for
    "not given" and fall back to the configured one without a word.
    """
    if not value.strip():
        raise argparse.ArgumentTypeError('must not be empty')
    return value


class ConfigCheck(hostargs.HostCommand, command.Command):
    """Check the configuration for mistakes oslo.config lets pass.

    Reads the files of --config-file (default: nova.conf where oslo.config
    finds it) and prints one line per finding, "error: [group] option:
    message" or "warning: ...", then a summary. Checked, in the groups of
    cyborg-nova only (Nova's own groups are not looked at):

      - groups that look like ours but are not ([cyborg-nova]), and
        unknown options of our groups, with the nearest known name;
      - values that do not parse (program_timeout = abc, auto_ready =
        maybe);
      - [cyborg_nova] enabled_drivers: drivers not installed, drivers
        that refuse their options or are not configured, driver groups
        set for drivers that are not enabled;
      - the drivers' own checks: [cyborg_nic_sriov] mappings,
        [cyborg_nvidia_gpu] vGPU types;
      - [cyborg_nova] sysfs_root (or --sysfs-root): empty, or no PCI bus
        there; then one discovery (reads sysfs, writes nothing): enabled
        drivers that find no device, devices left out and why, vGPU types
        no device offers.

    The host's driver-install / driver-uninstall choices are not applied.
    The exit status is 1 if there is an error, else 0: warnings alone
    exit 0 unless --fatal-warnings is given.
    """

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        parser.add_argument(
            '--sysfs-root', metavar='DIR',
            help='Discover under DIR instead of [cyborg_nova] sysfs_root.')
        parser.add_argument(
            '--fatal-warnings', action='store_true',
            help='Exit with status 1 on warnings too.')
        return parser

    def take_action(self, parsed_args):
        conf = hostargs.conf(self.app)
        files = config_check.config_files(conf)
        root = parsed_args.sysfs_root
        findings = []
        if root is not None and not root.strip():
            findings.append(config_check.Finding(
                config_check.ERROR, None, '--sysfs-root',
                'empty: give a directory, or leave the option out for '
                '[cyborg_nova] sysfs_root'))
            root = None
        with config_check.quiet_discovery():
            findings += config_check.check(conf, files, sysfs_root=root)
        for finding in findings:
            self.app.stdout.write('%s\n' % finding)
        self.app.stdout.write('%s\n' % config_check.summary(findings, files))
        errors = any(f.severity == config_check.ERROR for f in findings)
        return 1 if errors or (findings and parsed_args.fatal_warnings) \
            else 0
