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

"""The Nova functional harness with accelerator hosts built from profiles.

Real Nova services (API, conductor, scheduler, computes) and a real
Placement run in this process; computes load ``cyborg_nova.*Driver``
through ``nova.virt`` exactly as nova.conf names it, so the shim module
must be installed (a non-editable install). Hardware is a sysfs tree
built from a host profile; nothing of Nova or Placement is mocked.
"""

import collections
import os
import sys

import fixtures
import nova.conf
from nova.tests.functional import integrated_helpers
from nova.tests.functional.libvirt import base as libvirt_base
from placement import deploy

from cyborg_drivers.fake import hosttree
from cyborg_drivers import loader
from cyborg_nova import conf as cn_conf
from tests import scrubhost

CONF = nova.conf.CONF
WRITES = ('PUT', 'POST', 'DELETE', 'PATCH')


class RequestCounter:
    """WSGI middleware in front of Placement: every request it served."""

    def __init__(self, app):
        self.app = app
        self.requests = []

    def __call__(self, environ, start_response):
        path = environ['PATH_INFO']
        if environ.get('QUERY_STRING'):
            path += '?' + environ['QUERY_STRING']
        self.requests.append((environ['REQUEST_METHOD'], path))
        return self.app(environ, start_response)

    def reset(self):
        self.requests = []

    def writes(self):
        return [r for r in self.requests if r[0] in WRITES]

    def summary(self):
        return collections.Counter(m for m, _ in self.requests)


class AcceleratorHostsMixin:
    """Accelerator hosts from profiles, for any of Nova's test bases."""

    enabled_drivers = ['nvidia_gpu', 'intel_fpga', 'xilinx_fpga',
                       'intel_qat']
    auto_ready = True

    def setUp(self):
        self.counter = None
        real_loadapp = deploy.loadapp

        def counting_loadapp(*args, **kwargs):
            self.counter = RequestCounter(real_loadapp(*args, **kwargs))
            return self.counter
        self.useFixture(fixtures.MonkeyPatch(
            'placement.deploy.loadapp', counting_loadapp))
        cn_conf.register_opts(CONF)
        loader.register_opts(CONF, list(loader.installed().values()))
        # The nova wheel installs api-paste.ini under <prefix>/etc/nova.
        self.flags(api_paste_config=os.path.join(
            sys.prefix, 'etc', 'nova', 'api-paste.ini'), group='wsgi')
        self.scrub_kernel = self.useFixture(scrubhost.ScrubKernel())
        super().setUp()
        # A test ends with the reset it held let go.
        self.addCleanup(self.scrub_kernel.gate.set)
        self.workdir = self.useFixture(fixtures.TempDir()).path
        self.trees = {}

    def _clear_attrs(self):
        # Nova's TestCase deletes test attributes at cleanup, which
        # breaks pytest's own teardown of the test object.
        pass

    def build_host(self, host, profile):
        """Build ``profile`` as ``host``'s sysfs tree; its root."""
        if isinstance(profile, str) and profile in hosttree.PROFILE_NAMES:
            profile = hosttree.profile_path(profile)
        root = os.path.join(self.workdir, host, 'sys')
        hosttree.build_tree(profile, root)
        self.trees[host] = root
        return root

    def configure_host(self, host):
        """Point [cyborg_nova] at ``host``'s tree and state store.

        The extension reads its options when the compute first reports,
        so each compute of the test binds the options set before it
        starts.
        """
        self.flags(sysfs_root=self.trees[host],
                   state_path=os.path.join(self.workdir, host,
                                           'state.sqlite'),
                   enabled_drivers=self.enabled_drivers,
                   auto_ready=self.auto_ready,
                   group='cyborg_nova')

    def start_accelerator_compute(self, host, profile):
        self.build_host(host, profile)
        self.configure_host(host)
        return self._start_compute(host)

    def accelerator_providers(self, host):
        """{PCI address: provider} of ``host``'s accelerator children."""
        root = self.placement.get(
            '/resource_providers?name=%s' % host).body[
            'resource_providers'][0]['uuid']
        prefix = '%s_accelerator_' % host
        resp = self.placement.get(
            '/resource_providers?in_tree=%s' % root, version='1.14')
        return {rp['name'][len(prefix):]: rp
                for rp in resp.body['resource_providers']
                if rp['name'].startswith(prefix)}

    def add_trait(self, rp_uuid, trait):
        """Add a trait as an operator would (creating it if needed)."""
        self.placement.put('/traits/%s' % trait, None, version='1.6')
        resp = self._set_provider_traits(
            rp_uuid, self._get_provider_traits(rp_uuid) + [trait])
        assert resp.status == 200, resp.body

    def flavor(self, extra_spec, name=None):
        return self._create_flavor(memory_mb=512, vcpu=1, disk=1,
                                   ephemeral=0, name=name,
                                   extra_spec=extra_spec)

    def server_allocations(self, server):
        return {rp: alloc['resources'] for rp, alloc in
                self._get_allocations_by_server_uuid(server['id']).items()}


class AcceleratorTestCase(AcceleratorHostsMixin,
                          integrated_helpers.ProviderUsageBaseTestCase):
    """Nova's fake driver with accelerators: scheduling and Placement."""

    compute_driver = 'cyborg_nova.MediumFakeDriver'


class LibvirtAcceleratorTestCase(AcceleratorHostsMixin,
                                 libvirt_base.ServersTestBase):
    """The real LibvirtDriver (on Nova's fakelibvirt) with accelerators."""

    microversion = 'latest'

    def _setup_compute_service(self):
        self.flags(compute_driver='cyborg_nova.LibvirtDriver')

    def start_accelerator_compute(self, host, profile):
        self.build_host(host, profile)
        self.configure_host(host)
        return self.start_compute(hostname=host)
