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

"""Run one reprogramming, and SIGKILL the process at a journal step.

``crash_worker.py CONFIG NODENAME DEVICE BITSTREAM WHEN:STEP`` runs it as
``cyborg-nova program`` does.

``crash_worker.py agent WHEN:STEP AGENT-ARGS...`` runs the real agent
(``cyborg_nova.cmd.agent``) instead; the job it is then given through
``POST /program`` kills it.

``after:STEP`` dies right after STEP is journaled (before the next
action); ``before:STEP`` dies right before it is journaled, i.e. once the
action that leads to it (a fence, a load, a trait write...) is done.
"""

import argparse
import os
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(HERE))))

from cyborg_nova.cmd import cli  # noqa: E402
from cyborg_nova.cmd import program as program_cmd  # noqa: E402
from cyborg_nova import programming  # noqa: E402


def die():
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def kill_at(point):
    """Make the journal kill this process at ``point`` (``WHEN:STEP``)."""
    when, _, at = point.partition(':')
    real_step, real_create = (programming.Journal.step,
                              programming.Journal.create)

    def step(self, job, name, *args, **kwargs):
        if (when, name) == ('before', at):
            die()
        result = real_step(self, job, name, *args, **kwargs)
        if (when, name) == ('after', at):
            die()
        return result

    def create(self, job):
        real_create(self, job)
        if (when, job.step) == ('after', at):
            die()
    programming.Journal.step = step
    programming.Journal.create = create


def main(argv):
    if argv[0] == 'agent':
        from cyborg_nova.cmd import agent
        kill_at(argv[1])
        return agent.main(argv[2:])
    config, nodename, device, bitstream, point = argv
    kill_at(point)
    app = cli.CyborgNovaApp()
    app.conf = cli.load_config([config])
    programmer = program_cmd.make_programmer(app, argparse.Namespace())
    job = programmer.program(nodename, device, bitstream)
    print('not killed: %s at %s' % (job.status, job.step))
    return 3


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
