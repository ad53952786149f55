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

"""A real libvirtd (with virtlogd and QEMU) for the hot-plug tests.

Uses the daemon already serving ``qemu:///system`` if there is one;
otherwise starts ``virtlogd`` and ``libvirtd`` in the foreground (no
systemd needed) and stops them, and only them, at the end. When neither
works, :class:`Unavailable` says why, for the tests to skip loudly.
Install what it needs with ``tools/install-libvirt-test-deps.sh``.
"""

from __future__ import annotations

import grp
import os
import shutil
import socket
import subprocess
import tempfile
import time

URI = 'qemu:///system'
EMULATOR = '/usr/bin/qemu-system-x86_64'
VIRTLOGD_SOCKET = '/run/libvirt/virtlogd-sock'
START_TIMEOUT = 30.0
HINT = 'run tools/install-libvirt-test-deps.sh <venv python> as root'


class Unavailable(Exception):
    """No libvirtd could be reached or started; the message says why."""


def _binary(name: str) -> str | None:
    return shutil.which(name) or shutil.which(
        name, path='/usr/sbin:/usr/bin:/sbin:/bin')


def _socket_answers(path: str) -> bool:
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.connect(path)
        return True
    except OSError:
        return False
    finally:
        sock.close()


class LibvirtDaemon:
    """``start()`` makes ``URI`` reachable; ``stop()`` undoes what it did."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen] = []
        self.kvm_restore: tuple[int, int, int] | None = None
        self.log_dir: str | None = None
        self.libvirt = None

    def _reachable(self) -> str | None:
        """None if ``URI`` answers, else libvirt's reason."""
        try:
            conn = self.libvirt.open(URI)
        except self.libvirt.libvirtError as exc:
            return str(exc.get_error_message() or exc)
        conn.close()
        return None

    def start(self) -> None:
        """:raises Unavailable: with the reason."""
        try:
            import libvirt
        except ImportError:
            raise Unavailable('libvirt-python is not installed in this '
                              'venv; %s' % HINT)
        self.libvirt = libvirt
        libvirt.registerErrorHandler(lambda ctx, err: None, None)
        if not os.path.exists(EMULATOR):
            raise Unavailable('%s is missing (qemu-system-x86); %s'
                              % (EMULATOR, HINT))
        self._kvm_permissions()
        if self._reachable() is None:
            return
        if os.geteuid() != 0:
            raise Unavailable('libvirtd is not running (%s) and only root '
                              'can start it' % self._reachable())
        binaries = {name: _binary(name) for name in ('libvirtd', 'virtlogd')}
        missing = [name for name, path in binaries.items() if not path]
        if missing:
            raise Unavailable('%s not installed (libvirt-daemon-system); %s'
                              % (', '.join(missing), HINT))
        self.log_dir = tempfile.mkdtemp(prefix='cyborg-libvirtd-')
        if not _socket_answers(VIRTLOGD_SOCKET):
            self._spawn(binaries['virtlogd'], 'virtlogd')
        proc = self._spawn(binaries['libvirtd'], 'libvirtd')
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            reason = self._reachable()
            if reason is None:
                return
            if proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise Unavailable('libvirtd did not start (%s): %s'
                                  % (reason, self._log_tail('libvirtd')))
            time.sleep(0.1)

    def _spawn(self, binary: str, name: str) -> subprocess.Popen:
        with open(os.path.join(self.log_dir, name + '.log'), 'w') as log:
            proc = subprocess.Popen([binary], stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        self.started.append(proc)
        return proc

    def _log_tail(self, name: str) -> str:
        try:
            with open(os.path.join(self.log_dir, name + '.log')) as f:
                lines = [line.strip() for line in f if 'error' in line]
        except OSError:
            return 'no log'
        return ' | '.join(lines[-3:]) or 'nothing in its log'

    def _kvm_permissions(self) -> None:
        """/dev/kvm as Debian's udev rule sets it (root:kvm 0660).

        When QEMU's user cannot open /dev/kvm, libvirt probes QEMU again
        (~30 s) at every domain definition, even for TCG domains.
        """
        path = '/dev/kvm'
        if os.geteuid() != 0 or not os.path.exists(path):
            return
        try:
            kvm_gid = grp.getgrnam('kvm').gr_gid
        except KeyError:
            return
        st = os.stat(path)
        if st.st_gid == kvm_gid and st.st_mode & 0o060 == 0o060:
            return
        self.kvm_restore = (st.st_uid, st.st_gid, st.st_mode & 0o7777)
        os.chown(path, st.st_uid, kvm_gid)
        os.chmod(path, 0o660)

    def stop(self) -> None:
        """Stop the daemons this started (libvirtd first); restore kvm."""
        for proc in reversed(self.started):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.started = []
        if self.kvm_restore is not None:
            uid, gid, mode = self.kvm_restore
            os.chown('/dev/kvm', uid, gid)
            os.chmod('/dev/kvm', mode)
            self.kvm_restore = None
        if self.log_dir:
            shutil.rmtree(self.log_dir, ignore_errors=True)
            self.log_dir = None


def domain_xml(server: str, name: str) -> str:
    """A tiny diskless TCG guest with a USB controller; starts in < 1 s.

    No OS runs in it, so it never answers a PCI (virtio) unplug request,
    while USB devices leave at once.
    """
    return """<domain type='qemu'>
  <name>%s</name>
  <uuid>%s</uuid>
  <memory unit='MiB'>64</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <features><acpi/></features>
  <on_poweroff>destroy</on_poweroff>
  <devices>
    <emulator>%s</emulator>
    <controller type='usb' model='piix3-uhci'/>
    <memballoon model='none'/>
  </devices>
</domain>""" % (name, server, EMULATOR)
