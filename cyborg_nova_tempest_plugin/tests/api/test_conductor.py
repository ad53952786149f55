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

"""The conductor-lite: agents UP, hardware matching Placement, errors."""

import jsonschema
from oslo_serialization import jsonutils as json
from tempest.lib.common import jsonschema_validator as validator
from tempest.lib import decorators
from tempest.lib import exceptions as lib_exc

from cyborg_nova_tempest_plugin.common import accelerators as acc
from cyborg_nova_tempest_plugin.services import schemas
from cyborg_nova_tempest_plugin.tests import base

#: The one kind of ``GET /hardware`` error that is the deployment's
#: choice, not a fault: the conductor-lite without ``[placement]``.
USAGE_UNKNOWN = 'usage of '


class ConductorApiTest(base.BaseConductorTest):
    """The listings answer their documented schemas."""

    @decorators.idempotent_id('0f6b2d9c-4e8a-4b13-a7c5-1d9e3f2a6b56')
    def test_list_agents(self):
        """``GET /agents``: one record per host, UP or DOWN."""
        # The client validates the response against the schema.
        agents = self.conductor.list_agents()['agents']
        hosts = [a['host'] for a in agents]
        self.assertEqual(sorted(set(hosts)), sorted(hosts),
                         'one record per host')

    @decorators.idempotent_id('4b7e1f9a-2c5d-4a86-b3e0-7d1f9c2a5e45')
    def test_list_hardware(self):
        """``GET /hardware``: devices of registered hosts, each once."""
        # The client validates the response against the schema.
        body = self.conductor.list_hardware()
        agents = {a['host'] for a in self.conductor.list_agents()['agents']}
        hosts = {e['host'] for e in body['hardware']}
        hosts.update(e['host'] for e in body['errors'])
        self.assertEqual(set(), hosts - agents,
                         'hosts listed that have no agent registered')
        uuids = [e['uuid'] for e in body['hardware']]
        self.assertEqual(sorted(set(uuids)), sorted(uuids),
                         'one entry per device')


class ConductorAgentsTest(base.BaseConductorPlacementTest):
    """Agents registered and UP; their hardware as Placement has it."""

    @decorators.idempotent_id('7d3c1a5e-8b2f-4c60-9d14-2e6a0f7b3c67')
    def test_compute_nodes_with_accelerators_have_up_agents(self):
        """Every node with accelerator providers has an agent UP."""
        providers, found = self.require_accelerator_providers()
        nodes = {providers[rp['root_provider_uuid']]['name']
                 for rp in found.values()}
        agents = {a['host']: a
                  for a in self.conductor.list_agents()['agents']}
        missing = sorted(nodes - set(agents))
        self.assertEqual([], missing,
                         'compute nodes with accelerators but no agent '
                         'registered; agents: %s' % sorted(agents))
        down = sorted(n for n in nodes if agents[n]['state'] != 'UP')
        self.assertEqual([], down, 'agents DOWN: %s'
                         % {n: agents[n] for n in down})

    @decorators.idempotent_id('a4e8f2b6-1c3d-4f79-8a25-6b0d9e1c4d78')
    def test_hardware_matches_placement(self):
        """Each local device listed is its provider in Placement.

        Same uuid, named after the agent's host and the PCI address, with
        the resource class, total and traits the agent reports (plus
        ``OWNER_CYBORG``).
        """
        providers, found = self.require_accelerator_providers()
        body = self.conductor.list_hardware()
        faults = [e for e in body['errors']
                  if not e['message'].startswith(USAGE_UNKNOWN)]
        self.assertEqual([], faults)
        local = [e for e in body['hardware']
                 if e['acc_specs']['remote'] == 0 and 'placement' in e]
        self.assertNotEqual([], local,
                            'the conductor-lite lists no local device, '
                            'but Placement has accelerators')
        for entry in local:
            rp = found.get(entry['uuid'])
            self.assertIsNotNone(
                rp, 'device %s of %s is no accelerator provider'
                % (entry['pci']['address'], entry['host']))
            self.assertEqual(
                entry['host'] + acc.NAME_INFIX + entry['pci']['address'],
                rp['name'])
            wanted = entry['placement']
            if wanted['total']:
                inventory = rp['inventories'].get(wanted['resource_class'])
                self.assertIsNotNone(inventory, '%s has no %s inventory'
                                     % (rp['name'],
                                        wanted['resource_class']))
                self.assertEqual(wanted['total'], inventory['total'])
            missing = set(wanted['traits']) - rp['traits']
            self.assertEqual(set(), missing,
                             '%s lacks traits its agent reports'
                             % rp['name'])
            if entry['usage'] is not None and wanted['total']:
                self.assertIn(wanted['resource_class'], entry['usage'])


class ConductorNegativeTest(base.BaseConductorTest):
    """Bad requests get 4xx answers with a JSON error message."""

    def assert_json_error(self, exc, code):
        """The error of ``exc`` is ``{"error": {code, title, message}}``."""
        body = exc.resp_body
        if isinstance(body, (str, bytes)):
            body = json.loads(body)
        jsonschema.validate(body, schemas.error,
                            cls=validator.JSONSCHEMA_VALIDATOR,
                            format_checker=validator.FORMAT_CHECKER)
        self.assertEqual(code, body['error']['code'])
        return body['error']['message']

    @decorators.attr(type=['negative'])
    @decorators.idempotent_id('3e9a7c1f-0d5b-4e8a-b6f2-9c4d1a7e5f89')
    def test_list_agents_without_token(self):
        """No ``X-Auth-Token``: 401, with the header to use."""
        client = base.conductor_client(token=None)
        exc = self.assertRaises(lib_exc.Unauthorized, client.list_agents)
        self.assert_json_error(exc, 401)
        self.assertEqual('X-Auth-Token', exc.resp['www-authenticate'])

    @decorators.attr(type=['negative'])
    @decorators.idempotent_id('b8d2e6a4-5f1c-4a3b-9e07-4f6c2b8d1e90')
    def test_list_hardware_with_wrong_token(self):
        """A token the conductor-lite does not know: 401."""
        client = base.conductor_client(token='not-the-token')
        exc = self.assertRaises(lib_exc.Unauthorized, client.list_hardware)
        self.assert_json_error(exc, 401)

    @decorators.attr(type=['negative'])
    @decorators.idempotent_id('6c1f4b8e-2a9d-4d57-a3e6-8b0f5c2d7a01')
    def test_hello_with_invalid_body(self):
        """A registration missing its fields: 400, saying what is wrong."""
        exc = self.assertRaises(lib_exc.BadRequest, self.conductor.hello,
                                {'status': 'READY'})
        message = self.assert_json_error(exc, 400)
        self.assertIn('required', message)

    @decorators.attr(type=['negative'])
    @decorators.idempotent_id('d5a0e3c7-9b4f-4e21-8c6a-1f7d3b9e2c12')
    def test_hello_with_bad_endpoint(self):
        """An endpoint that is no http(s) URL: 400, nothing registered."""
        host = 'tempest-not-an-agent'
        exc = self.assertRaises(
            lib_exc.BadRequest, self.conductor.hello,
            {'status': 'READY', 'host': host,
             'endpoint': 'file:///etc/passwd'})
        self.assert_json_error(exc, 400)
        hosts = [a['host'] for a in self.conductor.list_agents()['agents']]
        self.assertNotIn(host, hosts)

    @decorators.attr(type=['negative'])
    @decorators.idempotent_id('9f2b7d4a-6e3c-4b81-a5d9-2c8e0f4a6b23')
    def test_hello_with_body_that_is_not_json(self):
        """A body that does not parse: 400."""
        exc = self.assertRaises(lib_exc.BadRequest, self.conductor.hello,
                                '{"status": ')
        self.assert_json_error(exc, 400)

    @decorators.attr(type=['negative'])
    @decorators.idempotent_id('1a6e9c3b-7d2f-4f05-b8e4-3d9a1c5f7e34')
    def test_unknown_path(self):
        """A path the API does not have: 404 in the same JSON form."""
        exc = self.assertRaises(lib_exc.NotFound, self.conductor.get,
                                'no-such-resource')
        self.assert_json_error(exc, 404)
