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

"""Lifecycle notifications through a real RabbitMQ broker.

A private broker (:mod:`tests.functional.rabbitmq_fixture`) and an
oslo.messaging notification listener on it; the agent of a fake FPGA
host (a sysfs tree reported to a real Placement) emits every event the
project declares from its own code paths: discovery (a device leaving
and coming back, a port reporting errors and clearing them, a device
made ready in the store) and programming. Each payload is validated
against the JSON Schema of its version. A broker that is down costs the
emitting operation one refused connection, logged, and nothing else.
"""

from __future__ import annotations

import glob
import logging
import os
import socket
import subprocess
import sys
import threading
import time

import jsonschema
from oslo_config import cfg
import oslo_messaging
import pytest

from cyborg_drivers import device as device_model
from cyborg_nova import health
from cyborg_nova import notifications
from cyborg_nova import store as state_store
from tests import aer_sysfs
from tests.functional.agent import base as agent_base
from tests.functional.programming import base
from tests.functional.programming.test_agent_conductor import agent_job
from tests.functional.programming.test_agent_conductor import wait_job
from tests.functional import rabbitmq_fixture
from tests.unit.programming import fakes

pytestmark = pytest.mark.skipif(rabbitmq_fixture.missing() is not None,
                                reason=str(rabbitmq_fixture.missing()))

PAC0, PAC1 = fakes.PAC0, fakes.PAC1
#: Seconds an operation may take however the broker is.
BOUND = 15
#: Seconds a sender with oslo.messaging's default retry is shown blocked.
BLOCKED = 5


@pytest.fixture(scope='module')
def broker(tmp_path_factory):
    server = rabbitmq_fixture.RabbitBroker(
        str(tmp_path_factory.mktemp('rabbitmq')))
    server.setUp()
    print('\nRabbitMQ started in %.1f s' % server.start_seconds)
    yield server
    server.cleanUp()


class Collector:
    """An oslo.messaging notification listener keeping what it gets."""

    def __init__(self, url: str) -> None:
        conf = cfg.ConfigOpts()
        conf([])
        self.transport = oslo_messaging.get_notification_transport(
            conf, url=url)
        self.received: list[dict] = []
        self.listener = oslo_messaging.get_notification_listener(
            self.transport, [oslo_messaging.Target(topic='notifications')],
            [self], executor='threading')

    def _keep(self, priority, publisher_id, event_type, payload):
        self.received.append({'priority': priority, 'event_type': event_type,
                              'publisher_id': publisher_id,
                              'payload': payload})

    def info(self, ctxt, publisher_id, event_type, payload, metadata):
        self._keep('info', publisher_id, event_type, payload)

    def warn(self, ctxt, publisher_id, event_type, payload, metadata):
        self._keep('warn', publisher_id, event_type, payload)

    def wait(self, event: str, address: str, timeout: float = 30) -> dict:
        """The first ``accelerator.<event>`` of ``address`` received."""
        def found():
            for message in self.received:
                data = message['payload']['cyborg_nova_object.data']
                if (message['event_type'] == 'accelerator.' + event
                        and data['address'] == address):
                    return message
        return agent_base.wait_for(found, timeout,
                                   what='accelerator.%s of %s: got %s' % (
                                       event, address, self.events()))

    def events(self) -> list[str]:
        return [m['event_type'] for m in self.received]

    def stop(self) -> None:
        self.listener.stop()
        self.listener.wait()
        self.transport.cleanup()


@pytest.fixture
def collector(broker):
    collector = Collector(broker.url)
    collector.listener.start()
    yield collector
    collector.stop()


def notifying_agent(host: base.Host, url: str) -> agent_base.AgentProcess:
    agent = host.agent(extra={'oslo_messaging_notifications': {
        'driver': 'messagingv2', 'transport_url': url}})
    agent.setUp()
    return agent


def discover(agent: agent_base.AgentProcess) -> None:
    assert agent.call('POST', '/discovery').status_code == 202


def port_errors(host: base.Host, address: str, value: str) -> None:
    """What the FPGA port of ``address`` reports in ``errors/errors``."""
    (port,) = glob.glob(os.path.join(host.root, 'bus', 'pci', 'devices',
                                     address, 'fpga', '*',
                                     'intel-fpga-port.*'))
    os.makedirs(os.path.join(port, 'errors'), exist_ok=True)
    with open(os.path.join(port, 'errors', 'errors'), 'w') as f:
        f.write(value + '\n')


def test_every_event_through_a_real_broker(host, broker, collector):
    agent = notifying_agent(host, broker.url)
    try:
        link = os.path.join(host.root, 'bus', 'pci', 'devices', PAC1)
        parked = os.path.join(host.directory, 'parked')
        # A device leaves the bus and comes back.
        os.rename(link, parked)
        discover(agent)
        collector.wait('removed', PAC1)
        os.rename(parked, link)
        discover(agent)
        collector.wait('discovered', PAC1)
        # Unfenced first: the fence that follows can then only be the
        # agent's reading of the hold (POST /discovery answers before it
        # is done), so the agent has seen the device held before it is
        # made ready again.
        agent_base.wait_for(lambda: host.reserved(PAC1) == 0,
                            what='the device back to be unfenced')
        # The operator holds it, then makes it ready again.
        store = state_store.StateStore(host.state_path)
        store.set_state(host.nodename, PAC1, state_store.HELD, 'test')
        discover(agent)
        agent_base.wait_for(lambda: host.reserved(PAC1) == 1,
                            what='the held device to be fenced')
        store.set_state(host.nodename, PAC1, state_store.READY)
        discover(agent)
        collector.wait('ready', PAC1)
        # Its port reports errors, then they are cleared.
        port_errors(host, PAC1, '0x1')
        discover(agent)
        collector.wait('unhealthy', PAC1)
        port_errors(host, PAC1, '0x0')
        discover(agent)
        collector.wait('healthy', PAC1)
        # The kernel counted a fatal PCIe error on the other card.
        aer_sysfs.write(host.root, PAC0, fatal=1)
        discover(agent)
        aer_error = collector.wait('aer_error', PAC0)
        # Cleared by the operator before it is reprogrammed.
        health.acknowledge(store, host.nodename, PAC0, host.root)
        store.set_state(host.nodename, PAC0, state_store.READY)
        discover(agent)
        agent_base.wait_for(lambda: host.reserved(PAC0) == 0,
                            what='the cleared card to be unfenced')
        # The other card is reprogrammed.
        resp = agent.call('POST', '/program', json={
            'device': PAC0, 'bitstream': 'intel/nlb3.gbs'})
        assert resp.status_code == 202, resp.text
        job = wait_job(lambda j: agent_job(agent, j),
                       resp.json()['program']['id'])
        assert job['status'] == 'succeeded', job
        programmed = collector.wait('programmed', PAC0)
    finally:
        agent.cleanUp()
    assert set(collector.events()) == {'accelerator.%s' % e
                                       for e in notifications.EVENTS}
    for message in collector.received:
        jsonschema.validate(message['payload'],
                            notifications.PAYLOAD_SCHEMA)
        assert message['publisher_id'] == ('cyborg-nova-agent.%s'
                                           % host.nodename)
        data = message['payload']['cyborg_nova_object.data']
        assert data['uuid'] == device_model.device_uuid(host.nodename,
                                                        data['address'])
        assert message['priority'] == (
            'warn' if message['event_type'] in (
                'accelerator.unhealthy', 'accelerator.aer_error')
            else 'info')
        assert (data['programming'] is None) == (
            message['event_type'] != 'accelerator.programmed')
    assert '1 fatal' in aer_error['payload'][
        'cyborg_nova_object.data']['reason']
    unhealthy = collector.wait('unhealthy', PAC1)
    assert 'reports errors 0x1' in unhealthy['payload'][
        'cyborg_nova_object.data']['reason']
    data = programmed['payload']['cyborg_nova_object.data']
    assert data['state'] == 'ready'
    assert base.function_trait(fakes.NLB3) in data['traits']
    assert data['programming']['job'] == job['id']
    assert data['programming']['function_id'] == fakes.hexid(fakes.NLB3)
    assert data['programming']['bitstream'] == 'intel/nlb3.gbs'
    print('\nreceived %d notifications: %s' % (
        len(collector.received), ', '.join(collector.events())))


def test_the_program_command_notifies_too(host, broker, collector):
    agent_base.write_config(host.conf, dict(
        host.sections, oslo_messaging_notifications={
            'driver': 'messagingv2', 'transport_url': broker.url}))
    rc, rows, err = host.program(PAC0)
    assert rc == 0, err
    message = collector.wait('programmed', PAC0)
    assert message['publisher_id'] == ('cyborg-nova-program.%s'
                                       % socket.gethostname())
    jsonschema.validate(message['payload'], notifications.PAYLOAD_SCHEMA)
    data = message['payload']['cyborg_nova_object.data']
    assert data['programming']['job'] == rows[0]['job']


def test_a_broker_that_is_down_neither_blocks_nor_fails_the_agent(host):
    # Nothing listens on this port: every connection is refused.
    url = 'rabbit://guest:guest@127.0.0.1:%d/' % rabbitmq_fixture.free_port()
    agent = notifying_agent(host, url)
    try:
        link = os.path.join(host.root, 'bus', 'pci', 'devices', PAC1)
        parked = os.path.join(host.directory, 'parked')
        os.rename(link, parked)
        started = time.monotonic()
        discover(agent)
        agent_base.wait_for(lambda: host.reserved(PAC1) == 1, BOUND,
                            what='the vanished device to be fenced')
        fenced = time.monotonic() - started
        os.rename(parked, link)
        started = time.monotonic()
        resp = agent.call('POST', '/program', json={
            'device': PAC0, 'bitstream': 'intel/nlb3.gbs'})
        assert resp.status_code == 202, resp.text
        job = wait_job(lambda j: agent_job(agent, j),
                       resp.json()['program']['id'], BOUND)
        programmed = time.monotonic() - started
        assert job['status'] == 'succeeded', job
        assert base.check_consistent(host, PAC0) == 'programmed'
        log = agent.log()
    finally:
        agent.cleanUp()
    for event in ('removed', 'programmed'):
        assert 'Could not send notification' in log.split(
            "'event_type': 'accelerator.%s'" % event)[0], event
    print('\nbroker down: fenced in %.2f s, programmed in %.2f s'
          % (fenced, programmed))


#: A process sending with oslo.messaging's default retry (-1): one
#: notification, then another after a line on stdin.
DEFAULT_RETRY_SENDER = '''
import sys
from oslo_config import cfg
import oslo_messaging
conf = cfg.ConfigOpts()
conf([])
transport = oslo_messaging.get_notification_transport(conf, url=sys.argv[1])
notifier = oslo_messaging.Notifier(transport, 'x', driver='messagingv2',
                                   topics=['notifications'])
notifier.info({}, 'accelerator.ready', {})
print('sent', flush=True)
sys.stdin.readline()
notifier.info({}, 'accelerator.removed', {})
print('returned', flush=True)
'''


def test_a_broker_stopped_midway(tmp_path, caplog):
    """Sent while it runs; bounded and logged once it stopped.

    While oslo.messaging's default (retry forever) blocks the sender.
    """
    server = rabbitmq_fixture.RabbitBroker(str(tmp_path / 'rabbitmq'))
    server.setUp()
    default = subprocess.Popen(
        [sys.executable, '-c', DEFAULT_RETRY_SENDER, server.url],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True, env=agent_base.env())
    notifier = None
    try:
        collector = Collector(server.url)
        collector.listener.start()
        conf = cfg.ConfigOpts()
        conf([])
        oslo_messaging.get_notification_transport(conf)
        conf.set_override('driver', ['messagingv2'],
                          group='oslo_messaging_notifications')
        conf.set_override('transport_url', server.url,
                          group='oslo_messaging_notifications')
        notifier = notifications.Notifier(conf, 'cyborg-nova-agent.cn1')
        acc = device_model.Accelerator(
            address=PAC0, driver='intel_fpga', device_type='FPGA',
            resource_class='FPGA', traits=(), total=1, vendor_id='8086',
            product_id='09c4', class_code='0x120000')
        notifier.emit('ready', acc, 'cn1', 'ready')
        collector.wait('ready', PAC0)
        assert agent_base._readline(default.stdout, BOUND) == 'sent\n'
        collector.stop()
        server.stop()
        with caplog.at_level(logging.ERROR):
            took = []
            for _ in range(3):
                started = time.monotonic()
                notifier.emit('removed', acc, 'cn1', 'ready', 'gone')
                took.append(time.monotonic() - started)
        assert max(took) < BOUND, took
        assert caplog.text.count('Could not send notification') == 3
        # The default sender, told to send now, is still trying.
        default.stdin.write('go\n')
        default.stdin.flush()
        with pytest.raises(subprocess.TimeoutExpired):
            default.wait(BLOCKED)
        print('\nbroker stopped: each emit returned in %s s; with retry '
              '-1 still blocked after %d s'
              % (', '.join('%.3f' % t for t in took), BLOCKED))

        def heartbeats():
            return sum(t.name == 'Rabbit-heartbeat'
                       for t in threading.enumerate())
        before = heartbeats()
        notifier.close()
        assert heartbeats() < before
    finally:
        # The notifier's connection keeps a heartbeat thread that, with
        # the broker gone, would log tracebacks into later tests.
        if notifier is not None:
            notifier.close()
        default.kill()
        default.wait()
        server.cleanUp()
