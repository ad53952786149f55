"""Nova's fake driver with accelerators (devstack CI, test clouds)."""

from nova.virt import fake

from cyborg_nova.virt import extension


class FakeDriver(extension.AcceleratorProviderMixin, fake.FakeDriver):
    """``compute_driver = cyborg_nova.FakeDriver``."""


class MediumFakeDriver(extension.AcceleratorProviderMixin,
                       fake.MediumFakeDriver):
    """Nova's MediumFakeDriver (smaller host) with accelerators."""
