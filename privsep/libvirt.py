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

"""Privileged hot-plug of accelerator PCI functions through libvirt.

For callers that may not open libvirt's socket (the agent, the CLI run as
an unprivileged user). Each entrypoint takes an instance uuid and, where
it needs one, a PCI address, both checked before libvirt is asked
anything; the ``<hostdev>`` XML is built here with
:func:`cyborg_drivers.guest_xml.pci_hostdev_xml` (the text Nova's config
classes give, without Nova), never taken from the caller. The daemon
connects to the local system libvirt (:data:`URI`), which the caller
cannot choose either.

The work is done by undecorated ``_inner`` functions that take an open
connection, so tests run them against a real libvirtd without a daemon.
"""

from __future__ import annotations

import re

import libvirt

from cyborg_drivers import guest_xml
import privsep
from privsep import _common

#: The system libvirt of this host (Nova's default for kvm and qemu).
URI = 'qemu:///system'

_UUID = re.compile(r'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-'
                   r'[0-9a-f]{12}')


def _connect():
    """A connection to :data:`URI`.

    :raises NotPossible: libvirt is not reachable.
    """
    libvirt.registerErrorHandler(lambda ctx, err: None, None)
    try:
        return libvirt.open(URI)
    except libvirt.libvirtError as exc:
        raise privsep.NotPossible('cannot connect to libvirt at %s: %s'
                                  % (URI, guest_xml.libvirt_reason(exc)))


def _domain(conn, server_uuid: object):
    """The domain of instance ``server_uuid``.

    :raises InvalidArgument: not a lowercase uuid, or no such domain.
    :raises NotPossible: libvirt failed otherwise.
    """
    server_uuid = _common.validate_identifier(
        'server_uuid', server_uuid, _UUID, 'a lowercase instance uuid')
    try:
        return conn.lookupByUUIDString(server_uuid)
    except libvirt.libvirtError as exc:
        if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
            raise privsep.InvalidArgument(
                'no instance %s on this host (libvirt at %s has no such '
                'domain)' % (server_uuid, URI))
        raise privsep.NotPossible('cannot look up instance %s: %s'
                                  % (server_uuid,
                                     guest_xml.libvirt_reason(exc)))


def _hostdev_xml(address: object) -> str:
    """The managed PCI ``<hostdev>`` of a validated address."""
    return guest_xml.pci_hostdev_xml(_common.pci_address(address))


def _with_connection(inner, *args):
    conn = _connect()
    try:
        return inner(conn, *args)
    finally:
        conn.close()


@privsep.libvirt_hotplug.entrypoint
def check_domain(server_uuid: str) -> None:
    """Refuse an instance that has no domain on this host.

    :raises InvalidArgument: a bad uuid, or no such domain.
    :raises NotPossible: libvirt is not reachable.
    """
    _with_connection(_check_domain, server_uuid)


def _check_domain(conn, server_uuid: str) -> None:
    _domain(conn, server_uuid)


@privsep.libvirt_hotplug.entrypoint
def attach_hostdev(server_uuid: str, address: str) -> None:
    """Hot-plug the PCI function ``address`` into the instance.

    Into the running guest and its persistent definition (only the
    definition of a stopped instance).

    :raises InvalidArgument: (or a subclass) a bad uuid or address, or no
        such instance; libvirt was not asked to change anything.
    :raises NotPossible: libvirt refused; the message is its reason.
    """
    _with_connection(_attach_hostdev, server_uuid, address)


def _attach_hostdev(conn, server_uuid: str, address: str) -> None:
    xml = _hostdev_xml(address)
    dom = _domain(conn, server_uuid)
    try:
        dom.attachDeviceFlags(xml, guest_xml.hotplug_flags(libvirt, dom))
    except libvirt.libvirtError as exc:
        raise privsep.NotPossible(guest_xml.libvirt_reason(exc))


@privsep.libvirt_hotplug.entrypoint
def detach_hostdev(server_uuid: str, address: str) -> None:
    """Ask the instance to release the PCI function ``address``.

    From wherever it is, the running guest and/or the definition.
    Returns once libvirt accepted the request: the definition loses the
    device at once, a running guest when it acknowledges the unplug
    (poll :func:`hostdev_attached`).

    :raises InvalidArgument: (or a subclass) a bad uuid or address, or no
        such instance.
    :raises NotPossible: the device is not attached, or libvirt refused.
    """
    _with_connection(_detach_hostdev, server_uuid, address)


def _detach_hostdev(conn, server_uuid: str, address: str) -> None:
    xml = _hostdev_xml(address)
    dom = _domain(conn, server_uuid)
    try:
        flags = _where(dom, address)
        if not flags:
            raise privsep.NotPossible('%s is not attached to instance %s'
                                      % (address, server_uuid))
        dom.detachDeviceFlags(xml, flags)
    except libvirt.libvirtError as exc:
        raise privsep.NotPossible(guest_xml.libvirt_reason(exc))


@privsep.libvirt_hotplug.entrypoint
def hostdev_attached(server_uuid: str, address: str) -> bool:
    """Whether the instance holds a PCI ``<hostdev>`` of ``address``.

    In the running guest or in its definition.

    :raises InvalidArgument: (or a subclass) a bad uuid or address, or no
        such instance.
    :raises NotPossible: libvirt failed.
    """
    return _with_connection(_hostdev_attached, server_uuid, address)


def _hostdev_attached(conn, server_uuid: str, address: str) -> bool:
    address = _common.pci_address(address)
    dom = _domain(conn, server_uuid)
    try:
        return bool(_where(dom, address))
    except libvirt.libvirtError as exc:
        raise privsep.NotPossible(guest_xml.libvirt_reason(exc))


def _where(dom, address: str) -> int:
    """Where the hostdev of ``address`` is (``VIR_DOMAIN_AFFECT_*``)."""
    return guest_xml.where_attached(
        libvirt, dom,
        lambda root: guest_xml.hostdev_in_domain(root, address))
