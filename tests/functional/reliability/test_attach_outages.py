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

"""Placement killed (SIGKILL) in the middle of attaches and detaches.

The attach and detach of cyborg_nova.hotplug.flow, in this process, against a
real libvirtd and a real Placement that is killed right before or right
after one of its requests, then started again. Every operation either
completes or fails with one line saying what was left; no unit is ever
recorded without its allocation, and once Placement is back, the same
command (or a detach) brings everything to where an undisturbed run
ends.
"""

import threading
import time

from keystoneauth1 import adapter
from keystoneauth1 import session
from keystoneauth1 import token_endpoint
import pytest

from cyborg_nova import assignments
from cyborg_nova.hotplug import errors as hotplug_errors
from cyborg_nova.hotplug import flow as hotplug_flow
from cyborg_nova.hotplug import guest as hotplug_guest
from tests.functional.libvirt import conftest as libvirt_conftest
from tests.functional.libvirt import libvirtd_fixture
from tests.functional.reliability import common

PF = '0000:70:00.0'
RC = 'CUSTOM_QAT'


def _run(qat_host, placement, operation, server, when, method, fragment,
         **kwargs):
    """``operation``, Placement killed ``when`` METHOD url, then back.

    The result, or the AttachError.
    """
    client = common.Hooked(qat_host.client)
    client.on(when, method, fragment, placement.kill)
    guest = hotplug_guest.open_guest(libvirtd_fixture.URI, server)
    try:
        result = operation(client, qat_host.store, qat_host.nodename,
                           guest, qat_host.accelerators[PF], **kwargs)
    except hotplug_errors.AttachError as exc:
        result = exc
    finally:
        guest.close()
        placement.ensure_running()
    # The kill happened (a hook on no request is for none).
    assert method == 'NONE' or not client.pending(), (when, method)
    return result


def _units(qat_host, server):
    return assignments.Assignments(qat_host.store).of_consumer(server)


# (when, request, running guest, what the attach does)
ATTACH_POINTS = [
    ('before', 'GET', False, 'refused'),
    ('before', 'PUT', False, 'refused'),
    ('after', 'PUT', False, 'attached'),
    # libvirt refuses a running guest a PCI hostdev here (no VFIO): the
    # allocation cannot be taken back while Placement is down.
    ('after', 'PUT', True, 'left allocated'),
]


@pytest.mark.parametrize('when, method, running, outcome', ATTACH_POINTS,
                         ids=['%s-%s-%s' % (p[0], p[1], 'running' if p[2]
                                            else 'stopped')
                              for p in ATTACH_POINTS])
def test_attach_through_an_outage(qat_host, live_placement, domains,
                                  when, method, running, outcome):
    domain = domains(running=running)
    booted = qat_host.boot(domain.server)
    rp = qat_host.provider(PF)
    result = _run(qat_host, live_placement, hotplug_flow.attach,
                  domain.server, when, method, '/allocations/', count=2)
    after = qat_host.allocations(domain.server)
    units = _units(qat_host, domain.server)
    if outcome == 'refused':
        assert isinstance(result, hotplug_errors.AttachError), result
        assert str(result).startswith('cannot reach Placement'), result
        assert after == booted
        assert units == {}
        assert '<hostdev' not in domain.xml(inactive=True)
    elif outcome == 'attached':
        assert isinstance(result, hotplug_flow.Result), result
        assert after['allocations'][rp]['resources'] == {RC: 2}
        assert units == {rp: list(result.units)}
        assert domain.xml(inactive=True).count('<hostdev') == 2
    else:
        assert isinstance(result, hotplug_errors.AttachError), result
        message = str(result)
        assert 'libvirt refused to attach' in message
        assert 'could not be removed again' in message, message
        assert after['allocations'][rp]['resources'] == {RC: 2}
        # The units went back; only the allocation is left over.
        assert units == {}
        assert '<hostdev' not in domain.xml()
    # Once Placement is back, a detach (for what is attached or left
    # over) or the attach again ends where an undisturbed run does.
    if outcome == 'refused':
        done = _run(qat_host, live_placement, hotplug_flow.attach,
                    domain.server, 'before', 'NONE', '', count=2)
        assert isinstance(done, hotplug_flow.Result), done
        assert qat_host.allocations(domain.server)['allocations'][rp][
            'resources'] == {RC: 2}
    done = _run(qat_host, live_placement, hotplug_flow.detach,
                domain.server, 'before', 'NONE', '', timeout=5)
    assert isinstance(done, hotplug_flow.Result), done
    assert libvirt_conftest.without_generations(
        qat_host.allocations(domain.server)) == (
        libvirt_conftest.without_generations(booted))
    assert _units(qat_host, domain.server) == {}
    assert '<hostdev' not in domain.xml(inactive=True)
    assert qat_host.usage(PF) == {RC: 0}


@pytest.mark.parametrize('when, method', [('before', 'GET'),
                                          ('before', 'PUT'),
                                          ('after', 'PUT')])
def test_detach_through_an_outage(qat_host, live_placement, domains, when,
                                  method):
    domain = domains(running=False)
    booted = qat_host.boot(domain.server)
    rp = qat_host.provider(PF)
    done = _run(qat_host, live_placement, hotplug_flow.attach,
                domain.server, 'before', 'NONE', '')
    assert isinstance(done, hotplug_flow.Result), done
    result = _run(qat_host, live_placement, hotplug_flow.detach,
                  domain.server, when, method, '/allocations/', timeout=5)
    units = _units(qat_host, domain.server)
    allocated = rp in qat_host.allocations(domain.server)['allocations']
    if (when, method) == ('before', 'GET'):
        # Refused before anything changed.
        assert isinstance(result, hotplug_errors.AttachError), result
        assert str(result).startswith('cannot reach Placement'), result
        assert units == {rp: list(done.units)} and allocated
        assert '<hostdev' in domain.xml(inactive=True)
    elif (when, method) == ('before', 'PUT'):
        # The guest let go; the allocation stays until a detach again.
        assert isinstance(result, hotplug_errors.AttachError), result
        assert 'run instance-detach again' in str(result), result
        assert units == {} and allocated
        assert '<hostdev' not in domain.xml(inactive=True)
    else:
        assert isinstance(result, hotplug_flow.Result), result
        assert units == {} and not allocated
    if not isinstance(result, hotplug_flow.Result):
        again = _run(qat_host, live_placement, hotplug_flow.detach,
                     domain.server, 'before', 'NONE', '', timeout=5)
        assert isinstance(again, hotplug_flow.Result), again
    assert libvirt_conftest.without_generations(
        qat_host.allocations(domain.server)) == (
        libvirt_conftest.without_generations(booted))
    assert _units(qat_host, domain.server) == {}
    assert '<hostdev' not in domain.xml(inactive=True)


def test_attach_rides_out_a_restart_with_connect_retries(qat_host,
                                                         live_placement,
                                                         domains):
    """With ``[placement] connect_retries`` set, an attach waits it out.

    keystoneauth retries a refused connection that many times, with
    exponential backoff (0.5 s, 1 s, 2 s...): a Placement restarting
    (back ~2 s later, more on a loaded machine) only delays the attach.
    """
    domain = domains(running=False)
    booted = qat_host.boot(domain.server)
    rp = qat_host.provider(PF)
    client = common.Hooked(adapter.Adapter(
        qat_host.client.session, service_type='placement',
        connect_retries=6))

    def restart():
        live_placement.kill()
        threading.Thread(target=live_placement.start).start()
    client.on('before', 'PUT', '/allocations/', restart)
    guest = hotplug_guest.open_guest(libvirtd_fixture.URI, domain.server)
    started = time.monotonic()
    try:
        result = hotplug_flow.attach(client, qat_host.store, qat_host.nodename,
                                     guest, qat_host.accelerators[PF], count=2)
        # Bounded: 0.5 + 1 + ... + 16 s of backoff at most, and requests.
        assert time.monotonic() - started < 60
        assert not client.pending()
        assert qat_host.allocations(domain.server)['allocations'][rp][
            'resources'] == {RC: 2}
        assert _units(qat_host, domain.server) == {rp: list(result.units)}
        hotplug_flow.detach(client, qat_host.store, qat_host.nodename, guest,
                            qat_host.accelerators[PF], timeout=5)
    finally:
        guest.close()
    assert libvirt_conftest.without_generations(
        qat_host.allocations(domain.server)) == (
        libvirt_conftest.without_generations(booted))


def test_attach_whose_allocation_answer_is_lost(qat_host, live_placement,
                                                domains):
    """Placement commits the allocation, and its answer never comes.

    The attach cannot know whether its write happened: it must not leave
    an allocation that no unit and no device goes with.
    """
    domain = domains(running=False)
    booted = qat_host.boot(domain.server)
    proxy = common.LossyProxy(live_placement.endpoint)
    client = adapter.Adapter(
        session.Session(auth=token_endpoint.Token(proxy.endpoint,
                                                  'admin')),
        service_type='placement')
    proxy.lose('PUT', '/allocations/')
    guest = hotplug_guest.open_guest(libvirtd_fixture.URI, domain.server)
    try:
        with pytest.raises(hotplug_errors.AttachError) as failed:
            hotplug_flow.attach(client, qat_host.store, qat_host.nodename,
                                guest, qat_host.accelerators[PF], count=2)
    finally:
        guest.close()
        proxy.stop()
    assert len(proxy.lost) == 1 and proxy.lost[0].endswith('204'), (
        proxy.lost)
    assert 'nothing was changed' in str(failed.value), failed.value
    # Written, then taken back: as booted.
    assert libvirt_conftest.without_generations(
        qat_host.allocations(domain.server)) == (
        libvirt_conftest.without_generations(booted))
    assert _units(qat_host, domain.server) == {}
    assert '<hostdev' not in domain.xml(inactive=True)
