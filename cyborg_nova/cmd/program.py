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

"""``program`` and ``program-show``: safe FPGA reprogramming on this host.

Also runnable before the ``cyborg_nova.cli`` entry points are installed:
``python -m cyborg_nova.cmd.program program --device ... --bitstream ...``.
"""

from __future__ import annotations

import socket
import sys

from cliff import lister
from cliff import show

from cyborg_nova.cmd import cli
from cyborg_nova.cmd import columns
from cyborg_nova.cmd import hostargs
from cyborg_nova import lifecycle
from cyborg_nova import notifications
from cyborg_nova import placement
from cyborg_nova import privileged
from cyborg_nova import programming

_COLUMNS = ('device', 'job', 'status', 'step', 'function_id', 'error')


def make_programmer(app, parsed_args) -> programming.Programmer:
    """A Programmer with this host's drivers, store and Placement."""
    conf = hostargs.conf(app)
    store = hostargs.store(conf)
    client = hostargs.placement_client(app, parsed_args)
    drivers = lifecycle.host_drivers(conf, store)
    # oslo.privsep imports eventlet, whose first import in a worker
    # thread leaves that thread unjoinable: import it here, in the main
    # thread, before the loads run in workers.
    privileged.quiet_import('privsep')
    return programming.Programmer(
        conf, store, client, drivers, conf.cyborg_nova.sysfs_root,
        privileged_setup=lambda: privileged.start_privsep(conf, 'sysfs_admin'),
        notifier=notifications.Notifier(
            conf, 'cyborg-nova-program.%s' % socket.gethostname()))


def _row(device: str, outcome) -> tuple:
    if isinstance(outcome, programming.Refused):
        return (device, '', programming.REFUSED, '', '', str(outcome))
    return (device, outcome.id, outcome.status, outcome.step,
            outcome.function_id, outcome.error or '')


class Program(hostargs.HostCommand, lister.Lister):
    """Reprogram FPGAs of this host with a bitstream, safely.

    The bitstream is a name under [cyborg_nova] bitstream_dir; its header
    (Intel GBS or Xilinx xclbin2) must name the region's interface id.
    Each device is then fenced in Placement (fully reserved), proven
    unallocated (refused, naming the instances, if not), programmed
    through the privsep helper, verified in sysfs, given the new
    function trait and unfenced. A failure leaves the device fenced in
    the "failed" state with the CUSTOM_FPGA_PROGRAMMING_FAILED trait.
    Jobs a killed process left unfinished are finished first. Several
    devices are programmed concurrently ([cyborg_nova]
    program_concurrency). Exit status 1 if any device was refused or
    failed (with --all-free-in-host, devices in use are skipped).
    """

    # Another driver failing to discover is said (a warning), but the
    # status is the programming's.
    driver_failures_fail = False

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument(
            '--device', action='append', metavar='DEVICE',
            help='PCI address, provider uuid or provider name of an FPGA; '
                 'repeat for more')
        which.add_argument(
            '--all-free-in-host', action='store_true',
            help='every FPGA of this host the bitstream fits that no '
                 'instance holds')
        parser.add_argument('--bitstream', required=True, metavar='NAME',
                            help='file name (or relative path) under '
                                 '[cyborg_nova] bitstream_dir')
        parser.add_argument('--region', help='the FPGA region (default: '
                                             'the one the bitstream fits)')
        parser.add_argument('--concurrency', type=int, metavar='N',
                            help='devices programmed at once (default: '
                                 '[cyborg_nova] program_concurrency)')
        hostargs.add_nodename(parser)
        placement.register_argparse(parser)
        return parser

    def take_action(self, parsed_args):
        if parsed_args.concurrency is not None and (
                parsed_args.concurrency < 1):
            raise lifecycle.LifecycleError('--concurrency must be 1 or '
                                           'more')
        programmer = make_programmer(self.app, parsed_args)
        nodename = parsed_args.nodename
        for job in programmer.recover():
            self.app.stderr.write('finished interrupted job %s of %s: %s\n'
                                  % (job.id, job.address, job.status))
        rows = []
        self.failed = False
        if parsed_args.all_free_in_host:
            devices, skipped = programmer.free_fpgas(nodename,
                                                     parsed_args.bitstream)
            rows += [(d, '', 'skipped', '', '', why)
                     for d, why in skipped.items()]
        else:
            devices = parsed_args.device
            if len(devices) == 1:
                # One device: a refusal is the command's error.
                job = programmer.program(nodename, devices[0],
                                         parsed_args.bitstream,
                                         parsed_args.region)
                self.failed = job.status != programming.SUCCEEDED
                return _COLUMNS, [_row(devices[0], job)]
        outcome = programmer.program_many(
            nodename, devices, parsed_args.bitstream, parsed_args.region,
            parsed_args.concurrency)
        for device, result in outcome.items():
            rows.append(_row(device, result))
            if isinstance(result, programming.Refused) or (
                    result.status != programming.SUCCEEDED):
                self.failed = True
        # The exit status is then 1 (hostargs.HostCommand).
        return _COLUMNS, sorted(rows)


class ProgramShow(hostargs.HostCommand, show.ShowOne):
    """Show an FPGA programming job of this host and its journal."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument('job', help='the job id (from "program")')
        return parser

    def take_action(self, parsed_args):
        conf = hostargs.conf(self.app)
        store = hostargs.read_store(conf)
        if store is None:
            raise lifecycle.LifecycleError(
                'no programming job %s on this host: %s'
                % (parsed_args.job, hostargs.missing_store(conf)))
        job = programming.Journal(store).get(parsed_args.job)
        if job is None:
            raise lifecycle.LifecycleError('no programming job %s on this '
                                           'host' % parsed_args.job)
        data = job.to_dict()
        data['steps'] = columns.ListColumn(
            ['%s %.3f%s' % (s['step'], s['at'],
                            ' %s' % s['detail'] if s['detail'] else '')
             for s in data['steps']])
        return tuple(data), tuple(data.values())


COMMANDS = {'program': Program, 'program-show': ProgramShow}


def main(argv: list[str] | None = None) -> int:
    """``cyborg-nova``, with these commands even if not installed yet."""
    app = cli.CyborgNovaApp()
    for name, command in COMMANDS.items():
        app.command_manager.add_command(name, command)
    return app.run(sys.argv[1:] if argv is None else argv)


if __name__ == '__main__':
    sys.exit(main())
