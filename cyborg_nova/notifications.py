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
``.removed`` (and ``.programmed`` when an FPGA is reprogrammed, and
``.aer_error`` when PCIe AER error counts take an effect), sent
through oslo.messaging. The driver is ``[oslo_messaging_notifications]
driver``; the default, none configured, sends nothing (``noop``).

Every event carries one payload, :data:`PAYLOAD_NAME` at
:data:`PAYLOAD_VERSION`; :data:`PAYLOAD_SCHEMA` is its JSON Schema.
Version history: 1.0 the accelerator, its state and a reason; 1.1 adds
``programming`` (the job, region, bitstream and functions of
``accelerator.programmed``; null in the other events).

A notification's connection is not retried (:data:`DEFAULT_RETRY`;
``[oslo_messaging_notifications] retry`` when set to 0 or more): an
unreachable broker costs the emitting operation (discovery, fencing,
programming) one failed connection, logged, and the notification; it
does not block it, as oslo.messaging's default of -1 (retry forever)
would.
"""

from __future__ import annotations

import logging

from oslo_config import cfg

from cyborg_drivers import device as device_model

LOG = logging.getLogger(__name__)

PAYLOAD_NAME = 'AcceleratorPayload'
PAYLOAD_VERSION = '1.1'
EVENTS = ('discovered', 'ready', 'unhealthy', 'healthy', 'removed',
          'programmed', 'aer_error')
#: The events sent at WARN priority; the others are INFO.
WARNINGS = ('unhealthy', 'aer_error')
#: Connection retries of one notification when the configured ``retry``
#: is oslo.messaging's default, -1 (forever).
DEFAULT_RETRY = 0

_STRING = {'type': 'string'}
_NULLABLE_STRING = {'type': ['string', 'null']}
_STRINGS = {'type': 'array', 'items': _STRING}
#: The JSON Schema of the payload at :data:`PAYLOAD_VERSION`.
PAYLOAD_SCHEMA = {
    '$schema': 'https://json-schema.org/draft/2020-12/schema',
    'type': 'object',
    'required': ['cyborg_nova_object.name', 'cyborg_nova_object.version',
                 'cyborg_nova_object.namespace', 'cyborg_nova_object.data'],
    'additionalProperties': False,
    'properties': {
        'cyborg_nova_object.name': {'const': PAYLOAD_NAME},
        'cyborg_nova_object.version': {'const': PAYLOAD_VERSION},
        'cyborg_nova_object.namespace': {'const': 'cyborg_nova'},
        'cyborg_nova_object.data': {
            'type': 'object',
            'additionalProperties': False,
            'required': ['uuid', 'host', 'address', 'driver', 'device_type',
                         'resource_class', 'traits', 'total', 'state',
                         'problems', 'reason', 'programming'],
            'properties': {
                'uuid': {'type': 'string', 'format': 'uuid'},
                'host': _STRING,
                'address': _STRING,
                'driver': _STRING,
                'device_type': _STRING,
                'resource_class': _STRING,
                'traits': _STRINGS,
                'total': {'type': 'integer', 'minimum': 0},
                'state': _NULLABLE_STRING,
                'problems': _STRINGS,
                'reason': _NULLABLE_STRING,
                'programming': {
                    'type': ['object', 'null'],
                    'additionalProperties': False,
                    'required': ['job', 'region', 'bitstream',
                                 'function_id', 'previous_function_id'],
                    'properties': {
                        'job': _STRING,
                        'region': _STRING,
                        'bitstream': _STRING,
                        'function_id': _STRING,
                        'previous_function_id': _NULLABLE_STRING,
                    },
                },
            },
        },
    },
}


def payload(accelerator: device_model.Accelerator, nodename: str,
            state: str | None, reason: str | None = None,
            programming: dict | None = None) -> dict:
    """The versioned payload of one accelerator.

    In the oslo.versionedobjects layout Nova's notifications use, so
    consumers parse it the same way.

    :param programming: for ``programmed``: ``job``, ``region``,
        ``bitstream``, ``function_id``, ``previous_function_id``.
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
            'programming': programming,
        },
    }


class Notifier:
    """Sends lifecycle notifications; never fails its caller."""

    def __init__(self, conf: cfg.ConfigOpts, publisher_id: str) -> None:
        self._notifier = None
        try:
            # Imported here: oslo.messaging loads oslo.service's eventlet
            # backend, which costs the CLI's commands start-up time and
            # prints eventlet's deprecation warning; only a Notifier needs
            # it.
            import oslo_messaging
            transport = oslo_messaging.get_notification_transport(conf)
            # No driver configured means none, as "noop" does.
            opts = conf.oslo_messaging_notifications
            if set(opts.driver) - {'noop'}:
                retry = opts.retry if opts.retry >= 0 else DEFAULT_RETRY
                self._notifier = oslo_messaging.Notifier(
                    transport, publisher_id=publisher_id, retry=retry)
        except Exception as exc:
            # A broken messaging setup must not take fencing down.
            LOG.error('Notifications disabled: %s', exc)
            self._notifier = None

    @property
    def enabled(self) -> bool:
        return self._notifier is not None

    def close(self) -> None:
        """Release the broker connection (and its heartbeat thread).

        Later emits send nothing.
        """
        if self._notifier is not None:
            notifier, self._notifier = self._notifier, None
            notifier.transport.cleanup()

    def emit(self, event: str, accelerator: device_model.Accelerator,
             nodename: str, state: str | None,
             reason: str | None = None,
             programming: dict | None = None) -> None:
        if event not in EVENTS:
            raise ValueError('unknown notification event %r' % event)
        if not self.enabled:
            return
        body = payload(accelerator, nodename, state, reason, programming)
        try:
            send = (self._notifier.warn if event in WARNINGS
                    else self._notifier.info)
            send({}, 'accelerator.%s' % event, body)
        except Exception as exc:
            LOG.warning('Cannot send accelerator.%s for %s: %s', event,
                        accelerator.address, exc)
