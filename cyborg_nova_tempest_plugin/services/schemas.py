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

"""Response schemas of the conductor-lite's API, as the tests expect them.

Written from the API reference rather than imported from cyborg-nova, so
that a change of the service's responses shows up here as a failed
contract. Shapes as :meth:`tempest.lib.common.rest_client.RestClient.
validate_response` takes them.
"""

_DATE_TIME = {'type': 'string', 'format': 'iso8601-date-time'}

agent = {
    'type': 'object',
    'properties': {
        'host': {'type': 'string', 'minLength': 1},
        'endpoint': {'type': 'string', 'pattern': '^https?://'},
        'status': {'type': 'string'},
        'state': {'type': 'string', 'enum': ['UP', 'DOWN']},
        'first_seen': _DATE_TIME,
        'last_seen': _DATE_TIME,
    },
    'additionalProperties': False,
    'required': ['host', 'endpoint', 'status', 'state', 'first_seen',
                 'last_seen'],
}

list_agents = {
    'status_code': [200],
    'response_body': {
        'type': 'object',
        'properties': {'agents': {'type': 'array', 'items': agent}},
        'additionalProperties': False,
        'required': ['agents'],
    },
}

hardware_entry = {
    'type': 'object',
    'properties': {
        'uuid': {'type': 'string', 'minLength': 1},
        'host': {'type': 'string', 'minLength': 1},
        'acc_specs': {
            'type': 'object',
            'properties': {
                'remote': {'type': 'integer', 'enum': [0, 1]},
                'num': {'type': 'integer', 'minimum': 0},
                'device_type': {'type': 'string'},
                'acc_capability': {'type': 'object'},
            },
            'required': ['remote', 'num', 'device_type', 'acc_capability'],
        },
        'acc_status': {
            'type': 'object',
            'properties': {
                'setup_required': {'type': 'boolean'},
                'reboot_required': {'type': 'boolean'},
            },
            'required': ['setup_required', 'reboot_required'],
        },
        'usage': {
            'type': ['object', 'null'],
            'additionalProperties': {'type': 'integer', 'minimum': 0},
        },
        # Local devices also say where they are and what Placement gets.
        'pci': {
            'type': 'object',
            'properties': {
                'address': {'type': 'string'},
                'vendor_id': {'type': 'string'},
                'product_id': {'type': 'string'},
            },
            'required': ['address', 'vendor_id', 'product_id'],
        },
        'placement': {
            'type': 'object',
            'properties': {
                'resource_class': {'type': 'string'},
                'traits': {'type': 'array', 'items': {'type': 'string'}},
                'total': {'type': 'integer', 'minimum': 0},
            },
            'required': ['resource_class', 'traits', 'total'],
        },
    },
    'required': ['uuid', 'host', 'acc_specs', 'acc_status', 'usage'],
}

list_hardware = {
    'status_code': [200],
    'response_body': {
        'type': 'object',
        'properties': {
            'hardware': {'type': 'array', 'items': hardware_entry},
            'errors': {
                'type': 'array',
                'items': {
                    'type': 'object',
                    'properties': {'host': {'type': 'string'},
                                   'message': {'type': 'string'}},
                    'additionalProperties': False,
                    'required': ['host', 'message'],
                },
            },
        },
        'additionalProperties': False,
        'required': ['hardware', 'errors'],
    },
}

#: Every error response: ``{"error": {"code", "title", "message"}}``.
error = {
    'type': 'object',
    'properties': {
        'error': {
            'type': 'object',
            'properties': {
                'code': {'type': 'integer'},
                'title': {'type': 'string'},
                'message': {'type': 'string', 'minLength': 1},
            },
            'required': ['code', 'title', 'message'],
        },
    },
    'required': ['error'],
}
