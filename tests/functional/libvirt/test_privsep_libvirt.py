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

"""The libvirt_hotplug privsep entrypoints, against a real libvirtd.

The inner functions run on a direct connection; then the entrypoints
themselves, through a real privsep daemon started with privsep-helper
(its errors cross the channel), and the attach flow through them.
"""

import os
import sys
import uuid

from oslo_config import cfg
import pytest

from cyborg_nova.conf import privsep as privsep_conf
from cyborg_nova.hotplug import errors as hotplug_errors
from cyborg_nova.hotplug import flow as hotplug_flow
from cyborg_nova.hotplug import guest as hotplug_guest
import privsep
try:
    import privsep.libvirt
except ImportError:
    # No libvirt-python: every test here needs the libvirtd fixture,
    # which skips them saying so.
    pass
from tests.functional.libvirt import conftest
from tests.functional.libvirt import libvirtd_fixture

PF = '0000:6b:00.0'
UNIT = '0000:6b:00.3'
REFUSAL = ("unsupported configuration: host doesn't support passthrough "
           "of host PCI devices")


@pytest.fixture
def conn(libvirtd):
    import libvirt
    conn = libvirt.open(libvirtd_fixture.URI)
    yield conn
    conn.close()


def test_running_guest_refuses_the_hostdev(conn, domains):
    domain = domains()
    xml = domain.xml()
    with pytest.raises(privsep.NotPossible) as caught:
        privsep.libvirt._attach_hostdev(conn, domain.server, UNIT)
    assert str(caught.value) == REFUSAL
    assert not privsep.libvirt._hostdev_attached(conn, domain.server, UNIT)
    assert domain.xml() == xml


def test_stopped_guest_takes_and_gives_back_the_hostdev(conn, domains):
    domain = domains(running=False)
    privsep.libvirt._attach_hostdev(conn, domain.server, UNIT)
    assert privsep.libvirt._hostdev_attached(conn, domain.server, UNIT)
    assert "function='0x3'" in domain.xml(inactive=True)
    privsep.libvirt._detach_hostdev(conn, domain.server, UNIT)
    assert not privsep.libvirt._hostdev_attached(conn, domain.server, UNIT)
    with pytest.raises(privsep.NotPossible) as caught:
        privsep.libvirt._detach_hostdev(conn, domain.server, UNIT)
    assert str(caught.value) == '%s is not attached to instance %s' % (
        UNIT, domain.server)


@pytest.mark.parametrize('server, address, error', [
    ('../../etc', UNIT, privsep.PathLikeArgument),
    ('not-a-uuid', UNIT, privsep.InvalidArgument),
    # Only the canonical, lowercase form.
    ('4E8B1C2A-0F6D-4C1B-9A3E-5D7F8B9C0A1B', UNIT, privsep.InvalidArgument),
    (None, UNIT, privsep.InvalidArgument),
    ('SERVER', '0000:6b:00.3/../../x', privsep.PathLikeArgument),
    ('SERVER', '6b:00.3', privsep.NotAPciAddress),
    ('SERVER', "0000:6b:00.3'/><disk", privsep.PathLikeArgument),
    ('SERVER', 3, privsep.InvalidArgument),
])
def test_bad_arguments_reach_no_libvirt_call(conn, domains, server,
                                             address, error):
    domain = domains(running=False)
    server = domain.server if server == 'SERVER' else server
    definition = domain.xml(inactive=True)
    for inner in (privsep.libvirt._attach_hostdev,
                  privsep.libvirt._detach_hostdev,
                  privsep.libvirt._hostdev_attached):
        with pytest.raises(error):
            inner(conn, server, address)
    assert domain.xml(inactive=True) == definition


def test_unknown_instance(conn):
    server = str(uuid.uuid4())
    with pytest.raises(privsep.InvalidArgument) as caught:
        privsep.libvirt._check_domain(conn, server)
    assert str(caught.value) == (
        'no instance %s on this host (libvirt at qemu:///system has no '
        'such domain)' % server)


@pytest.fixture
def daemon(libvirtd):
    """The libvirt_hotplug context served by a real privsep daemon."""
    context = privsep.libvirt_hotplug
    helper = os.path.join(os.path.dirname(sys.executable), 'privsep-helper')
    cfg.CONF.set_override(
        'helper_command', 'env PYTHONPATH=%s %s' % (conftest.REPO, helper),
        group=privsep_conf.LIBVIRT_SECTION)
    yield context
    context.stop()
    cfg.CONF.clear_override('helper_command',
                            group=privsep_conf.LIBVIRT_SECTION)


def test_entrypoints_through_the_daemon(daemon, domains):
    running, stopped = domains(), domains(running=False)
    # libvirt's refusal crosses the channel as NotPossible.
    with pytest.raises(privsep.NotPossible) as caught:
        privsep.libvirt.attach_hostdev(running.server, UNIT)
    assert str(caught.value) == REFUSAL
    with pytest.raises(privsep.NotAPciAddress):
        privsep.libvirt.attach_hostdev(stopped.server, 'x')
    privsep.libvirt.attach_hostdev(stopped.server, UNIT)
    assert privsep.libvirt.hostdev_attached(stopped.server, UNIT)
    privsep.libvirt.detach_hostdev(stopped.server, UNIT)
    assert not privsep.libvirt.hostdev_attached(stopped.server, UNIT)
    assert daemon.channel is not None


def test_attach_flow_through_the_daemon(daemon, host, domains):
    """What the CLI does when it may not open libvirt's socket."""
    accelerator = host.accelerators[PF]
    rp = host.provider(PF)
    with pytest.raises(hotplug_errors.AttachError) as caught:
        hotplug_guest.PrivsepGuest(str(uuid.uuid4()))
    assert 'no instance' in str(caught.value)

    running = domains()
    booted = host.boot(running.server)
    guest = hotplug_guest.PrivsepGuest(running.server)
    with pytest.raises(hotplug_errors.AttachError) as caught:
        hotplug_flow.attach(host.client, host.store, host.nodename, guest,
                            accelerator)
    assert REFUSAL in str(caught.value)
    assert conftest.without_generations(host.allocations(
        running.server)) == conftest.without_generations(booted)

    stopped = domains(running=False)
    booted = host.boot(stopped.server)
    guest = hotplug_guest.PrivsepGuest(stopped.server)
    result = hotplug_flow.attach(host.client, host.store, host.nodename, guest,
                                 accelerator)
    assert host.allocations(stopped.server)['allocations'][rp][
        'resources'] == {'CUSTOM_QAT': 1}
    result = hotplug_flow.detach(host.client, host.store, host.nodename, guest,
                                 accelerator, timeout=5)
    assert result.confirmed_by == 'immediate'
    assert conftest.without_generations(host.allocations(
        stopped.server)) == conftest.without_generations(booted)
