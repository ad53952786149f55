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

"""What every cyborg-nova test class shares: skips, clients, look-ups."""

from tempest.common import waiters
from tempest import config
from tempest.lib.common import api_version_utils
from tempest.lib import exceptions as lib_exc
from tempest.scenario import manager
from tempest import test

from cyborg_nova_tempest_plugin.common import accelerators as acc
from cyborg_nova_tempest_plugin.services import conductor_client as \
    conductor_client_mod

CONF = config.CONF

#: ``root_required`` (1.35) and ``parent_provider_uuid`` (1.14) are used;
#: every Placement a supported Nova runs with has 1.36.
PLACEMENT_MICROVERSION = '1.36'

SERVICE_UNAVAILABLE = ('cyborg-nova is not available in this cloud '
                       '([service_available] cyborg_nova = False)')
NO_CONDUCTOR = ('the conductor-lite is not configured '
                '([accelerators] conductor_endpoint is not set)')
NO_REPROGRAMMING = ('FPGA reprogramming is not available in this cloud '
                    '([accelerators] reprogramming = False)')

#: ``conductor_client()``'s default: the configured token.
CONFIGURED = object()


def conductor_client(token=CONFIGURED):
    """A conductor-lite client; ``token=None`` sends no token."""
    if token is CONFIGURED:
        token = CONF.accelerators.conductor_token
    return conductor_client_mod.ConductorClient(
        CONF.accelerators.conductor_endpoint, token,
        disable_ssl_certificate_validation=(
            CONF.identity.disable_ssl_certificate_validation),
        ca_certs=CONF.identity.ca_certificates_file,
        trace_requests=CONF.debug.trace_requests,
        http_timeout=CONF.service_clients.http_timeout,
        build_interval=CONF.compute.build_interval,
        build_timeout=CONF.compute.build_timeout)


class ServiceMixin(object):
    """Skips every test class of a cloud without cyborg-nova.

    Mixed into a :class:`tempest.test.BaseTestCase` subclass, before it.
    """

    @classmethod
    def skip_checks(cls):
        # The service's switch is checked before the base class's checks
        # so that a cloud without cyborg-nova skips for that reason, and
        # before any credentials or clients are made.
        if not CONF.service_available.cyborg_nova:
            raise cls.skipException(SERVICE_UNAVAILABLE)
        super(ServiceMixin, cls).skip_checks()


class ConductorMixin(ServiceMixin):
    """Skips without a conductor-lite; ``cls.conductor``, its client."""

    @classmethod
    def skip_checks(cls):
        super(ConductorMixin, cls).skip_checks()
        if not CONF.accelerators.conductor_endpoint:
            raise cls.skipException(NO_CONDUCTOR)

    @classmethod
    def setup_clients(cls):
        super(ConductorMixin, cls).setup_clients()
        cls.conductor = conductor_client()


class AcceleratorTestMixin(ServiceMixin):
    """Admin clients and Placement look-ups.

    Mixed into a :class:`tempest.test.BaseTestCase` subclass with admin
    credentials, before it.
    """

    @classmethod
    def setup_clients(cls):
        super(AcceleratorTestMixin, cls).setup_clients()
        cls.admin_placement = cls.os_admin.placement_client
        cls.admin_providers = cls.os_admin.resource_providers_client
        cls.admin_flavors = cls.os_admin.flavors_client
        cls.admin_servers = cls.os_admin.servers_client
        cls.admin_hypervisors = cls.os_admin.hypervisor_client

    @classmethod
    def resource_setup(cls):
        super(AcceleratorTestMixin, cls).resource_setup()
        cls.setup_api_microversion_fixture(
            placement_microversion=(
                api_version_utils.select_request_microversion(
                    PLACEMENT_MICROVERSION,
                    CONF.placement.min_microversion)))

    # -- Placement ---------------------------------------------------------

    def list_providers(self):
        """Every resource provider, by uuid."""
        body = self.admin_providers.list_resource_providers()
        return {rp['uuid']: rp for rp in body['resource_providers']}

    def accelerator_providers(self, providers=None):
        """The accelerator providers among ``providers`` (default: all).

        :return: ``{uuid: provider}``; each provider also has ``traits``
            (a set) and ``inventories`` (by resource class).
        """
        if providers is None:
            providers = self.list_providers()
        found = {}
        for rp_uuid, rp in providers.items():
            if not acc.is_accelerator_name(rp['name']):
                continue
            found[rp_uuid] = self.provider_details(rp)
        return found

    def provider_details(self, rp):
        """``rp`` with its ``traits`` and ``inventories``."""
        rp = dict(rp)
        rp['traits'] = set(self.admin_providers.list_resource_provider_traits(
            rp['uuid'])['traits'])
        rp['inventories'] = (
            self.admin_providers.list_resource_provider_inventories(
                rp['uuid'])['inventories'])
        return rp

    def require_accelerator_providers(self):
        """The accelerator providers; a skip when there are none.

        A cloud that is expected to report some (``[accelerators]
        expected_resource_classes`` or ``expected_traits``) fails instead.
        """
        providers = self.list_providers()
        found = self.accelerator_providers(providers)
        if not found:
            expected = (CONF.accelerators.expected_resource_classes
                        or CONF.accelerators.expected_traits)
            if expected:
                self.fail('no accelerator provider (named <nodename>%s'
                          '<PCI address>) in Placement, but [accelerators] '
                          'expects some' % acc.NAME_INFIX)
            self.skipTest('no accelerator providers in this cloud, and '
                          '[accelerators] expects none')
        return providers, found

    # -- flavors and servers -----------------------------------------------

    def accelerator_flavor(self, option):
        """The flavor ``[accelerators] <option>`` names, and its groups.

        :return: ``(flavor, groups)``: the flavor (a dict) and its
            accelerator request groups (see :func:`~cyborg_nova_tempest_
            plugin.common.accelerators.request_groups`).
        """
        wanted = getattr(CONF.accelerators, option)
        if not wanted:
            self.skipTest('[accelerators] %s is empty' % option)
        flavors = self.admin_flavors.list_flavors(
            detail=True, is_public='None')['flavors']
        matches = [f for f in flavors if f['id'] == wanted] or [
            f for f in flavors if f['name'] == wanted]
        if len(matches) != 1:
            self.fail('[accelerators] %s = %s: %d flavors have that id or '
                      'name' % (option, wanted, len(matches)))
        flavor = matches[0]
        specs = self.admin_flavors.list_flavor_extra_specs(
            flavor['id'])['extra_specs']
        groups = acc.accelerator_groups(acc.request_groups(specs))
        if not groups:
            self.fail('flavor %s asks for no accelerator: extra specs %s'
                      % (flavor['name'], specs))
        return flavor, groups

    def allocation_candidates(self, groups):
        """Placement's allocation candidates for accelerator ``groups``.

        A trait or resource class Placement does not know (no provider
        ever had it) means no candidate, not a 400.
        """
        traits, resource_classes = acc.group_names(groups)
        known_traits = set()
        if traits:
            known_traits = set(self.admin_placement.list_traits(
                name='in:' + ','.join(sorted(traits)))['traits'])
        known_rcs = {rc for rc in resource_classes
                     if self.resource_class_exists(rc)}
        known = acc.restrict_to_known(groups, known_traits, known_rcs)
        if known is None:
            return {'allocation_requests': [], 'provider_summaries': {}}
        return self.admin_placement.list_allocation_candidates(
            **acc.candidate_query(known))

    def resource_class_exists(self, resource_class):
        """Whether Placement knows ``resource_class``."""
        try:
            self.admin_placement.get('/resource_classes/%s'
                                     % resource_class)
        except lib_exc.NotFound:
            return False
        return True

    def require_candidates(self, flavor, groups):
        """The candidates for ``groups``; a skip when there are none."""
        candidates = self.allocation_candidates(groups)
        if not candidates['allocation_requests']:
            self.skipTest('no accelerator in this cloud matches flavor %s '
                          '(%s)' % (flavor['name'],
                                    acc.candidate_query(groups)))
        return candidates

    def check_server_accelerators(self, server_id, groups):
        """Assert the server holds accelerators as ``groups`` ask.

        Its Placement allocations must include, for every group, an
        accelerator provider of the compute node the server runs on with
        the group's resource class and traits; and in all exactly the
        accelerator resources the groups ask for.

        :return: the accelerator providers the server holds, by uuid.
        """
        server = self.admin_servers.show_server(server_id)['server']
        node = server['OS-EXT-SRV-ATTR:hypervisor_hostname']
        allocations = self.admin_placement.list_allocations(
            server_id)['allocations']
        providers = self.list_providers()
        held = {}
        for rp_uuid in allocations:
            rp = providers.get(rp_uuid)
            if rp is not None and acc.is_accelerator_name(rp['name']):
                held[rp_uuid] = self.provider_details(rp)
        self.assertNotEqual({}, held,
                            'server %s holds no accelerator provider: %s'
                            % (server_id, allocations))
        for rp_uuid, rp in held.items():
            root = providers[rp['root_provider_uuid']]
            self.assertEqual(node, root['name'],
                             'accelerator %s is not on the node of server '
                             '%s' % (rp['name'], server_id))
            self.assertEqual(rp['root_provider_uuid'],
                             rp['parent_provider_uuid'])
            self.assertIn(acc.OWNER_TRAIT, rp['traits'])
        wanted = {}
        for suffix, group in sorted(groups.items()):
            for rc, amount in group['resources'].items():
                wanted[rc] = wanted.get(rc, 0) + amount
                fits = [
                    u for u, rp in held.items()
                    if rc in allocations[u]['resources']
                    and group['required'] <= rp['traits']
                    and not group['forbidden'] & rp['traits']]
                self.assertNotEqual(
                    [], fits, 'no provider of %s with traits %s (and none '
                    'of %s) among the accelerators server %s holds: %s'
                    % (rc, sorted(group['required']),
                       sorted(group['forbidden']), server_id,
                       {u: (rp['name'], sorted(rp['traits']))
                        for u, rp in held.items()}))
        got = {}
        for rp_uuid in held:
            for rc, amount in allocations[rp_uuid]['resources'].items():
                got[rc] = got.get(rc, 0) + amount
        self.assertEqual(wanted, got,
                         'accelerator resources held by server %s'
                         % server_id)
        return held

    def wait_for_fault(self, server_id):
        """Wait for the server to go to ERROR; its fault."""
        # raise_on_error=False: else the waiter raises on the very status
        # it is waiting for once the server leaves BUILD.
        server = waiters.wait_for_server_status(
            self.servers_client, server_id, 'ERROR', ready_wait=False,
            raise_on_error=False)
        if 'fault' not in server:
            # Only shown to admins by some policies.
            server = self.admin_servers.show_server(server_id)['server']
        return server.get('fault', {})


class BaseAcceleratorTest(AcceleratorTestMixin, test.BaseTestCase):
    """An API test class: admin credentials, no network, no servers."""

    credentials = ['admin']

    @classmethod
    def setup_credentials(cls):
        cls.set_network_resources()
        super(BaseAcceleratorTest, cls).setup_credentials()


class BaseConductorTest(ConductorMixin, test.BaseTestCase):
    """An API test class of the conductor-lite alone: no cloud needed."""

    credentials = []


class BaseConductorPlacementTest(ConductorMixin, BaseAcceleratorTest):
    """An API test class of the conductor-lite and Placement (admin)."""


class BaseAcceleratorScenarioTest(AcceleratorTestMixin, manager.ScenarioTest):
    """A scenario test class: a project with a network, and an admin."""
