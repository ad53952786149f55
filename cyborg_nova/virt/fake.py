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

"""Nova's fake driver with accelerators (devstack CI, test clouds)."""

from nova.virt import fake

from cyborg_nova.virt import extension


class FakeDriver(extension.AcceleratorProviderMixin, fake.FakeDriver):
    """``compute_driver = cyborg_nova.FakeDriver``.

    Nova's FakeDriver gives its node a new uuid in every process, which
    suits Nova's functional harness (several computes in one process) but
    not a nova-compute service that restarts: use
    :class:`FakeDriverWithoutFakeNodes` there.
    """


class FakeDriverWithoutFakeNodes(extension.AcceleratorProviderMixin,
                                 fake.FakeDriverWithoutFakeNodes):
    """``compute_driver = cyborg_nova.FakeDriverWithoutFakeNodes``.

    Nova's FakeDriverWithoutFakeNodes with accelerators: one node named
    after ``[DEFAULT] host``, whose uuid is kept in ``compute_id`` under
    ``[DEFAULT] state_path`` as real drivers keep it, so nova-compute can
    be stopped (or killed) and started again. One compute per process:
    for devstack and test clouds, not for Nova's functional harness.
    """


class MediumFakeDriver(extension.AcceleratorProviderMixin,
                       fake.MediumFakeDriver):
    """Nova's MediumFakeDriver (smaller host) with accelerators."""
