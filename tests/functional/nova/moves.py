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

"""The harness for Nova's lifecycle operations with accelerator units.

Several computes on the real LibvirtDriver (Nova's fakelibvirt), each
built from the same host profile with a state store of its own; real
Placement and Nova services. After every step :meth:`check` compares, on
every accelerator provider of every host, Placement's allocations with
the units in the host's store, and every guest's ``<hostdev>`` elements
(from the last XML Nova defined for it) with its units.
"""

import collections
import os
import time
import xml.etree.ElementTree as ET

import fixtures
from nova import context as nova_context
from nova import objects
from nova.tests.fixtures import libvirt as fakelibvirt

from cyborg_nova import assignments
from cyborg_nova import audit
from cyborg_nova import store as state_store
from tests.functional.nova import base

DC_PF = '0000:70:00.0'
DC = 'trait:CUSTOM_QAT_DC'


def capture_xmls(test):
    """Every XML fakelibvirt is asked to define, into a list; the list."""
    xmls = []
    real = fakelibvirt.Connection.defineXML

    def define(conn, xml):
        xmls.append(xml)
        return real(conn, xml)
    test.useFixture(fixtures.MonkeyPatch(
        'nova.tests.fixtures.libvirt.Connection.defineXML', define))
    return xmls


def hostdevs(xml):
    """The PCI addresses of the managed ``<hostdev>`` elements, sorted."""
    found = []
    for dev in ET.fromstring(xml).iter('hostdev'):
        addr = dev.find('source/address')
        found.append('%04x:%02x:%02x.%x' % tuple(
            int(addr.get(k), 16)
            for k in ('domain', 'bus', 'slot', 'function')))
        assert dev.get('managed') == 'yes'
    return sorted(found)


class MovesTestCase(base.LibvirtAcceleratorTestCase):
    """Computes ``hosts`` from ``profile``, every move made possible."""

    hosts = ('host1', 'host2')
    profile = 'crypto-nic-host'
    # Moves, host targeting and services are admin operations.
    ADMIN_API = True

    def setUp(self):
        super().setUp()
        self.flags(allow_resize_to_same_host=True)
        # Placement is read by the tests, so keep the cycles explicit.
        self.defined = {}
        real = fakelibvirt.Connection.defineXML

        def define(conn, xml):
            uuid = ET.fromstring(xml).findtext('uuid')
            self.defined[(conn.getHostname(), uuid)] = xml
            return real(conn, xml)
        self.useFixture(fixtures.MonkeyPatch(
            'nova.tests.fixtures.libvirt.Connection.defineXML', define))
        # fakelibvirt has no disks to copy between hosts; the rest of the
        # move (claims, allocations, finish, confirm, revert) is Nova's.
        self.useFixture(fixtures.MonkeyPatch(
            'nova.virt.libvirt.driver.LibvirtDriver.'
            'migrate_disk_and_power_off', lambda *args, **kwargs: '{}'))
        for host in self.hosts:
            self.start_accelerator_compute(host, self.profile)
        self.providers = {}
        for host in self.hosts:
            for address, rp in self.accelerator_providers(host).items():
                self.providers[rp['uuid']] = (host, address)

    # -- helpers -------------------------------------------------------------

    def qat_flavor(self, count, name=None):
        """A flavor asking for ``count`` VFs of the PF offering dc."""
        name = name or 'qat%d' % count
        flavors = self.__dict__.setdefault('_flavors', {})
        if name not in flavors:
            flavors[name] = self.flavor(
                {'resources:CUSTOM_QAT': str(count), DC: 'required'},
                name=name)
        return flavors[name]

    def store(self, host):
        return assignments.Assignments(state_store.StateStore(
            os.path.join(self.workdir, host, 'state.sqlite')))

    def units(self, server, host=None):
        """The units ``server`` (or a migration uuid) holds on ``host``."""
        uuid = server if isinstance(server, str) else server['id']
        hosts = [host] if host else self.hosts
        return sorted(u for h in hosts
                      for us in self.store(h).of_consumer(uuid).values()
                      for u in us)

    def xml_units(self, server, host=None):
        """The units in ``server``'s guest on ``host``.

        The running domain's XML where fakelibvirt has the domain (what
        hot-plug changed included), else the last one Nova defined.
        """
        host = host or server['OS-EXT-SRV-ATTR:host']
        return hostdevs(self.guest_xml(server, host))

    def guest_xml(self, server, host):
        conn = self.computes[host].driver._host.get_connection()
        try:
            return conn.lookupByUUIDString(server['id']).XMLDesc(0)
        except fakelibvirt.libvirtError:
            return self.defined[(host, server['id'])]

    def start_on(self, host, flavor, **kwargs):
        """A server built on ``host``."""
        server = self._create_server(
            flavor_id=flavor, networks='none',
            host=host, **kwargs)
        if kwargs.get('expected_state', 'ACTIVE') == 'ACTIVE':
            self.assertEqual(host, server['OS-EXT-SRV-ATTR:host'])
        return server

    def usage(self):
        """{provider: {consumer: amount}} of every accelerator provider."""
        result = {}
        for rp in self.providers:
            allocs = self.placement.get(
                '/resource_providers/%s/allocations' % rp).body[
                'allocations']
            result[rp] = {c: sum(a['resources'].values())
                          for c, a in allocs.items()}
        return result

    def check(self, skip_hosts=(), stale=()):
        """Every invariant, on every host; the usage it checked.

        :param skip_hosts: computes that are down: their units are not
            compared with Placement (the API may have deleted a server
            meanwhile; the compute catches up when it is back).
        :param stale: consumers the API deleted without telling any
            compute: their rows may remain until each host's next update
            cycle, and only theirs are left out of the comparison.
        """
        self.wait_scrubbed(skip_hosts)
        usage = self.usage()
        for host in self.hosts:
            rows = self.store(host).all()
            by_unit = collections.Counter(r.unit for r in rows)
            doubled = [u for u, n in by_unit.items() if n > 1]
            self.assertEqual([], doubled, 'units serving two consumers')
            for row in rows:
                self.assertIn(row.provider, self.providers,
                              'a unit of an unknown provider: %s' % (row,))
                self.assertEqual(host, self.providers[row.provider][0],
                                 'a unit recorded on the wrong host')
        for rp, (host, address) in self.providers.items():
            if host in skip_hosts:
                continue
            rows = self.store(host).of_provider(rp)
            # Units held back for their scrub (or the operator): never
            # given to anyone meanwhile, and reserved.
            holds = self.store(host).store.units.holds(provider=rp)
            self.assertEqual(
                set(), {h.unit for h in holds} & {r.unit for r in rows},
                'units held back and given to a consumer on %s' % host)
            # Units a domain still holds after their consumer's
            # allocation went: never an allocation's, and reserved.
            kept = [r for r in rows if r.kept_for is not None]
            for row in kept:
                self.assertNotIn(row.consumer, usage[rp],
                                 'a kept unit of a consumer that holds '
                                 'an allocation: %s' % (row,))
                # Kept only while its domain is there and has it.
                domains = self.domain_units(host)
                self.assertIn(row.unit, domains.get(row.kept_for, ()),
                              'a unit kept for a domain that does not '
                              'have it: %s; the domains of %s: %s'
                              % (row, host, domains))
            held = collections.Counter(
                r.consumer for r in rows
                if r.consumer not in stale and r.kept_for is None)
            self.assertEqual(usage[rp], dict(held),
                             'units of %s on %s differ from Placement'
                             % (address, host))
            inv = self._get_provider_inventory(rp)
            for rc, record in inv.items():
                free_placement = (record['total'] - record['reserved']
                                  - sum(usage[rp].values()))
                # A stale consumer's rows hold nothing in Placement.
                free_store = (record['total'] - len(holds) - len(
                    [r for r in rows if r.consumer not in stale]))
                # reserved follows the kept and held rows at the next
                # cycle (a scrub's end writes it at once).
                if record['reserved'] == len(kept) + len(holds):
                    self.assertEqual(free_placement, free_store)
        for server in self.admin_api.get_servers(
                detail=True, search_opts={'all_tenants': 1}):
            if server['status'] not in ('ACTIVE', 'VERIFY_RESIZE'):
                continue
            host = server['OS-EXT-SRV-ATTR:host']
            allocated = sum(
                amount for rp, consumers in usage.items()
                for consumer, amount in consumers.items()
                if consumer == server['id']
                and self.providers[rp][0] == host)
            units = self.units(server, host)
            kept = self.kept(host)
            self.assertEqual(allocated,
                             len([u for u in units if u not in kept]))
            self.assertEqual(units, self.xml_units(server, host),
                             'the guest of %s on %s does not have its '
                             'units' % (server['id'], host))
        return usage

    def resize(self, server, flavor, host=None):
        """Resize ``server`` to ``flavor`` landing on ``host``."""
        if host is not None:
            for name in self.hosts:
                if name != host:
                    self.api.put_service(
                        self.computes[name].service_ref.uuid,
                        {'status': 'disabled'})
        try:
            server = self._resize_server(server, flavor)
        finally:
            for name in self.hosts:
                self.api.put_service(self.computes[name].service_ref.uuid,
                                     {'status': 'enabled'})
        if host is not None:
            self.assertEqual(host, server['OS-EXT-SRV-ATTR:host'])
        return server

    def migration_uuid(self, server):
        ctxt = nova_context.get_admin_context()
        return objects.MigrationList.get_by_filters(
            ctxt, {'instance_uuid': server['id']})[0].uuid

    def wait_scrubbed(self, skip_hosts=()):
        """Return once no unit of a running compute is being scrubbed.

        A freed unit is held while nova-compute scrubs it in the
        background; what a check compares is the state after that. A
        test holding the scrubs (``scrub_kernel.gate``) waits for
        nothing.
        """
        if not self.scrub_kernel.gate.is_set():
            return
        for _ in range(400):
            if not any(self.store(h).store.units.holds(state='scrubbing')
                       for h in self.hosts if h not in skip_hosts
                       and h not in getattr(self, 'down', ())):
                return
            time.sleep(0.05)
        self.fail('units still being scrubbed after 20 s')

    def delete(self, server):
        """Delete ``server``; return once Placement holds nothing of it.

        Nova destroys the instance in its database before its compute
        deletes the allocations, so the API's 404 can come first (Nova's
        own ``_delete_and_check_allocations`` waits for the same reason).
        A compute that is down leaves that to the API, which does it
        before answering.
        """
        self._delete_server(server)
        for _ in range(400):
            if not self._get_allocations_by_server_uuid(server['id']):
                return
            time.sleep(0.05)
        self.fail('Placement still holds allocations of deleted server %s'
                  % server['id'])

    def stop_host(self, host):
        """The compute goes down (stopped, and forced down in the API)."""
        self.computes[host].stop()
        self.api.put_service(self.computes[host].service_ref.uuid,
                             {'forced_down': True})

    def restart_host(self, host):
        self.configure_host(host)
        self.restart_compute_service(host)
        self.api.put_service(self.computes[host].service_ref.uuid,
                             {'forced_down': False})

    def cycle(self):
        """An update cycle on every running compute."""
        self._run_periodics()

    def kept(self, host):
        """{unit: domain} of ``host``'s units kept for a domain."""
        return {r.unit: r.kept_for for r in self.store(host).all()
                if r.kept_for is not None}

    def reserved(self, host, address, rc='CUSTOM_QAT'):
        rp = self.accelerator_providers(host)[address]['uuid']
        return self._get_provider_inventory(rp)[rc]['reserved']

    def domain_units(self, host):
        """{domain uuid: its units} of every domain on ``host``."""
        conn = self.computes[host].driver._host.get_connection()
        # Running and stopped (fakelibvirt lists nothing for flags 0).
        flags = (fakelibvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE
                 | fakelibvirt.VIR_CONNECT_LIST_DOMAINS_INACTIVE)
        return {dom.UUIDString(): audit.hostdev_addresses(dom.XMLDesc(0))
                for dom in conn.listAllDomains(flags)}

    def domain(self, host, server):
        """``server``'s libvirt domain on ``host`` (fakelibvirt)."""
        conn = self.computes[host].driver._host.get_connection()
        return conn.lookupByUUIDString(server['id'])

    def reap(self, host):
        """Nova's periodic reaping of the domains of deleted instances.

        ``[DEFAULT] running_deleted_instance_action = reap`` (the
        default): the compute destroys a domain whose instance Nova's
        database says is deleted, as it does every
        ``running_deleted_instance_poll_interval``.
        """
        self.computes[host].manager._cleanup_running_deleted_instances(
            nova_context.get_admin_context())
