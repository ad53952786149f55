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

"""JSON schemas both services' REST APIs use: FPGA programming.

The agent's ``POST /program`` takes :data:`PROGRAM_BODY` and answers
with a :data:`PROGRAM_JOB` (what :meth:`cyborg_nova.programming.Job.
to_dict` gives); the conductor-lite takes the same device, bitstream and
region properties and returns the agents' jobs as they are. Defined
once, here, so neither service imports the other's modules.
"""

from __future__ import annotations

from cyborg_drivers import bitstreams
from cyborg_nova import programming

UUID_PATTERN = ('^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-'
                '[0-9a-f]{12}$')

PROGRAM_BODY = {
    'type': 'object',
    'additionalProperties': False,
    'required': ['device', 'bitstream'],
    'properties': {
        'device': {'type': 'string', 'minLength': 1, 'maxLength': 255,
                   'pattern': r'^[A-Za-z0-9][A-Za-z0-9._:-]*$',
                   'description': 'PCI address, provider uuid or provider '
                                  'name of the FPGA.'},
        'bitstream': {'type': 'string', 'maxLength': 1024,
                      'pattern': bitstreams.NAME_PATTERN,
                      'description': 'Name (file name or relative path) '
                                     'under [cyborg_nova] bitstream_dir.'},
        'region': {'type': 'string', 'pattern': r'^[A-Za-z0-9._-]{1,64}$',
                   'description': 'The FPGA region; default: the one the '
                                  'bitstream fits.'},
        'job_id': {'type': 'string', 'pattern': UUID_PATTERN,
                   'description': 'The job\'s id; posting it again '
                                  'returns that job.'},
    },
}

PROGRAM_JOB = {
    'type': 'object',
    'required': ['id', 'host', 'device', 'provider', 'bitstream', 'step',
                 'status', 'error', 'steps'],
    'properties': {
        'id': {'type': 'string'},
        'host': {'type': 'string'},
        'device': {'type': 'string'},
        'provider': {'type': 'string'},
        'driver': {'type': 'string'},
        'region': {'type': 'string'},
        'bitstream': {'type': 'string'},
        'kind': {'type': 'string', 'enum': [bitstreams.GBS,
                                            bitstreams.XCLBIN]},
        'interface_id': {'type': 'string'},
        'function_id': {'type': 'string'},
        'previous_function_id': {'type': 'string', 'nullable': True},
        'previous_state': {'type': 'string'},
        'step': {'type': 'string', 'enum': list(programming.STEPS)},
        'status': {'type': 'string', 'enum': list(programming.STATUSES)},
        'error': {'type': 'string', 'nullable': True},
        'attempts': {'type': 'integer', 'minimum': 0},
        'created_at': {'type': 'number'},
        'updated_at': {'type': 'number'},
        'finished_at': {'type': 'number', 'nullable': True},
        'consumer': {'type': 'string', 'nullable': True,
                     'description': 'The instance allowed to hold the '
                                    'device while it is programmed.'},
        'steps': {'type': 'array', 'items': {
            'type': 'object',
            'required': ['step', 'at', 'detail'],
            'properties': {'step': {'type': 'string'},
                           'at': {'type': 'number'},
                           'detail': {'type': 'string', 'nullable': True}},
        }},
    },
}

PROGRAM_RESPONSE = {
    'type': 'object',
    'required': ['program'],
    'properties': {'program': PROGRAM_JOB},
}
