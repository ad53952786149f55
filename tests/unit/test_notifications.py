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

"""Lifecycle notifications: versioned payloads through oslo.messaging."""

import jsonschema
from oslo_config import cfg
import oslo_messaging
from oslo_messaging.notify import _impl_test
import pytest

from cyborg_drivers import device
from cyborg_nova import notifications

ACC = device.Accelerator(
    address='0000:3b:00.0', driver='intel_qat', device_type='CRYPTO',
    resource_class='CUSTOM_QAT', traits=('CUSTOM_QAT',), total=16,
    vendor_id='8086', product_id='4940', class_code='0x0b4000',
    problems=('QAT device state is down',))


def notifier(driver, **overrides):
    conf = cfg.ConfigOpts()
    conf([])
    oslo_messaging.get_notification_transport(conf)
    conf.set_override('driver', [driver] if driver else [],
                      group='oslo_messaging_notifications')
    for name, value in overrides.items():
        conf.set_override(name, value, group='oslo_messaging_notifications')
    return notifications.Notifier(conf, 'cyborg-nova-agent.cn1')


def test_noop_by_default_sends_nothing():
    _impl_test.reset()
    n = notifier(None)
    assert not n.enabled
    n.emit('removed', ACC, 'cn1', 'ready')
    assert _impl_test.NOTIFICATIONS == []


def test_versioned_payload():
    _impl_test.reset()
    n = notifier('test')
    n.emit('unhealthy', ACC, 'cn1', 'ready', 'QAT device state is down')
    ((ctxt, message, priority, retry),) = _impl_test.NOTIFICATIONS
    assert priority == 'WARN'
    assert message['event_type'] == 'accelerator.unhealthy'
    assert message['publisher_id'] == 'cyborg-nova-agent.cn1'
    body = message['payload']
    assert body['cyborg_nova_object.name'] == 'AcceleratorPayload'
    assert body['cyborg_nova_object.version'] == '1.1'
    jsonschema.validate(body, notifications.PAYLOAD_SCHEMA)
    data = body['cyborg_nova_object.data']
    assert data['uuid'] == device.device_uuid('cn1', '0000:3b:00.0')
    assert data['problems'] == ['QAT device state is down']
    assert data['state'] == 'ready'
    assert data['programming'] is None


def test_unknown_event_is_a_bug():
    with pytest.raises(ValueError):
        notifier('test').emit('exploded', ACC, 'cn1', None)


def test_connection_retries_are_bounded():
    # oslo.messaging's default (-1) retries forever and would block the
    # emitting operation while the broker is down.
    assert notifier('test')._notifier.retry == notifications.DEFAULT_RETRY
    assert notifier('test', retry=3)._notifier.retry == 3
