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

"""Policy defaults of the agent's and the conductor-lite's APIs.

Two roles, as the generic-driver spec's users: ``admin`` may change
things, ``reader`` (the "non-admin user with elevated privileges") may
list them; agents and out-of-process drivers register with the ``admin``
(or ``service``) role. Operators override these in a policy file; the
sample is ``oslopolicy-sample-generator --namespace cyborg_nova``.
"""

from oslo_policy import policy

READER = 'role:reader or role:admin or role:service'
ADMIN = 'role:admin'
SERVICE = 'role:admin or role:service'


def _rule(name, check, description, method, path):
    return policy.DocumentedRuleDefault(
        name=name, check_str=check, description=description,
        operations=[{'method': method, 'path': path}])


AGENT_RULES = [
    _rule('cyborg_nova:agent:discovery', ADMIN,
          'Start discovery across all drivers.', 'POST', '/discovery'),
    _rule('cyborg_nova:agent:hardware', READER,
          'List the host\'s hardware.', 'GET', '/hardware'),
    _rule('cyborg_nova:agent:hello', SERVICE,
          'Register an out-of-process driver.', 'POST', '/hello'),
    _rule('cyborg_nova:agent:drivers', READER,
          'List the drivers registered with the agent.', 'GET',
          '/drivers'),
    _rule('cyborg_nova:agent:services', ADMIN,
          'Discover the services of the host\'s devices.', 'POST',
          '/services'),
    _rule('cyborg_nova:agent:program', ADMIN,
          'Reprogram an FPGA of the host.', 'POST', '/program'),
    _rule('cyborg_nova:agent:program:show', READER,
          'Show an FPGA programming job.', 'GET', '/program/{job}'),
    _rule('cyborg_nova:agent:openapi', READER,
          'Read the OpenAPI document.', 'GET', '/openapi.json'),
]

CONDUCTOR_RULES = [
    _rule('cyborg_nova:conductor:hello', SERVICE,
          'Register an agent, or heartbeat.', 'POST', '/hello'),
    _rule('cyborg_nova:conductor:agents', READER,
          'List agents and whether they are up.', 'GET', '/agents'),
    _rule('cyborg_nova:conductor:drivers', READER,
          'List the drivers of every agent.', 'GET', '/drivers'),
    _rule('cyborg_nova:conductor:services', ADMIN,
          'Discover the services of every UP agent\'s devices.', 'POST',
          '/services'),
    _rule('cyborg_nova:conductor:hardware', READER,
          'List the hardware of every host.', 'GET', '/hardware'),
    _rule('cyborg_nova:conductor:programs:create', ADMIN,
          'Reprogram an FPGA of a host through its agent.', 'POST',
          '/programs'),
    _rule('cyborg_nova:conductor:programs:show', READER,
          'Show an FPGA programming job.', 'GET', '/programs/{id}'),
    _rule('cyborg_nova:conductor:openapi', READER,
          'Read the OpenAPI document.', 'GET', '/openapi.json'),
]


def list_rules():
    return AGENT_RULES + CONDUCTOR_RULES
