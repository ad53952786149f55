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

"""Versioned notifications of accelerator lifecycle changes.

The agent spec's "notifying users that their accelerators are ready":
``accelerator.discovered``, ``.ready``, ``.unhealthy``, ``.healthy``,
``.removed`` (and ``.programmed`` when an FPGA is reprogrammed), sent
through oslo.messaging. The driver is ``[oslo_messaging_notifications]
driver``; the default, none configured, sends nothing (``noop``).
"""

from __future__ import annotations

import logging

from oslo_config import cfg
import oslo_messaging

from cyborg_drivers import device as device_model

LOG = logging.getLogger(__name__)

PAYLOAD_NAME = 'AcceleratorPayload'
PAYLOAD_VERSION = '1.0'
EVENTS = ('discovered', 'ready', 'unhealthy', 'healthy', 'removed',
          'programmed')


def payload(accelerator: device_model.Accelerator, nodename: str,
            state: str | None, reason: str | None = None) -> dict:
    """The versioned payload of one accelerator.

    In the oslo.versionedobjects layout Nova's notifications use, so
    consumers parse it the same way.
    """
    return {
        'cyborg_nova_object.name': PAYLOAD_NAME,
        'cyborg_nova_object.version': PAYLOAD_VERSION,
        'cyborg_nova_object.namespace': 'cyborg_nova',
        'cyborg_nova_object.data': {
            'uuid': device_model.device_uuid(nodename, accelerator.address),
            'host': nodename,
            'address': accelerator.address,
            'driver': accelerator.driver,
            'device_type': accelerator.device_type,
            'resource_class': accelerator.resource_class,
            'traits': list(accelerator.traits),
            'total': accelerator.total,
            'state': state,
            'problems': list(accelerator.problems),
            'reason': reason,
        },
    }


class Notifier:
    """Sends lifecycle notifications; never fails its caller."""

    def __init__(self, conf: cfg.ConfigOpts, publisher_id: str) -> None:
        self._notifier = None
        try:
            transport = oslo_messaging.get_notification_transport(conf)
            # No driver configured means none, as "noop" does.
            if set(conf.oslo_messaging_notifications.driver) - {'noop'}:
                self._notifier = oslo_messaging.Notifier(
                    transport, publisher_id=publisher_id)
        except Exception as exc:
            # A broken messaging setup must not take fencing down.
            LOG.error('Notifications disabled: %s', exc)
            self._notifier = None

    @property
    def enabled(self) -> bool:
        return self._notifier is not None

    def emit(self, event: str, accelerator: device_model.Accelerator,
             nodename: str, state: str | None,
             reason: str | None = None) -> None:
        if event not in EVENTS:
            raise ValueError('unknown notification event %r' % event)
        if not self.enabled:
            return
        body = payload(accelerator, nodename, state, reason)
        try:
            send = (self._notifier.warn if event == 'unhealthy'
                    else self._notifier.info)
            send({}, 'accelerator.%s' % event, body)
        except Exception as exc:
            LOG.warning('Cannot send accelerator.%s for %s: %s', event,
                        accelerator.address, exc)
