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

"""PCIe AER errors injected into L1's emulated hardware, at L1's request.

A real-kernel test in L1 asks for an error by writing the name of one
of :data:`ERRORS` to ``$RUN/aer-inject`` (its run directory, shared with
this machine over 9p). This, run beside QEMU by run-l1.sh, has QEMU
inject it (``pcie_aer_inject_error`` through the QMP socket) and writes
the answer, the time it was sent and QEMU's reply, to
``$RUN/aer-injected``. Only the named errors can be asked for: L1
chooses which, never the command.

Usage (on this machine): python3 aer_inject.py RUN_DIR QMP_SOCKET
Runs until QEMU closes the socket (or never opens it within a minute).
"""

import json
import os
import select
import socket
import sys
import time

#: Request name -> the HMP command that injects it. ``rp2`` is the root
#: port the igb NIC sits behind (run-l1.sh); DLP, a Data Link Protocol
#: error, is uncorrectable and fatal by the severity register's
#: default, an error a real port reports about its link.
ERRORS = {
    'igb-port-fatal': 'pcie_aer_inject_error rp2 DLP',
}


class Qmp:
    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.file = self.sock.makefile('rw')
        self._read()  # the greeting
        self.call('qmp_capabilities')

    def _read(self) -> dict:
        while True:
            message = self.next()
            if 'event' not in message:
                return message

    def next(self) -> dict:
        line = self.file.readline()
        if not line:
            raise EOFError('QEMU closed the QMP socket')
        return json.loads(line)

    def wait(self, timeout: float) -> None:
        """Up to ``timeout`` s; raises EOFError once QEMU is gone."""
        if select.select([self.sock], [], [], timeout)[0]:
            self.next()  # an event, or the end

    def call(self, command: str, **arguments) -> dict:
        self.file.write(json.dumps({'execute': command,
                                    'arguments': arguments}) + '\n')
        self.file.flush()
        return self._read()


def main(run: str, path: str) -> int:
    for _ in range(600):
        if os.path.exists(path):
            break
        time.sleep(0.1)
    qmp = Qmp(path)
    request = os.path.join(run, 'aer-inject')
    answer = os.path.join(run, 'aer-injected')
    while True:
        try:
            with open(request) as f:
                name = f.read().strip()
        except FileNotFoundError:
            qmp.wait(0.05)
            continue
        if not name:
            # Seen mid-write: read again.
            qmp.wait(0.05)
            continue
        os.unlink(request)
        sent = time.time()
        if name in ERRORS:
            reply = qmp.call('human-monitor-command',
                             **{'command-line': ERRORS[name]})
        else:
            reply = {'error': 'unknown request %r (known: %s)'
                     % (name, ', '.join(sorted(ERRORS)))}
        partial = answer + '.part'
        with open(partial, 'w') as f:
            json.dump({'request': name, 'sent': sent, 'reply': reply}, f)
        os.rename(partial, answer)


if __name__ == '__main__':
    try:
        sys.exit(main(*sys.argv[1:]))
    except (EOFError, OSError) as exc:
        # QEMU is gone (or never came): nothing left to inject into.
        print('aer_inject: %s' % exc, file=sys.stderr)
        sys.exit(0)
