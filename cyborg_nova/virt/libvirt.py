"""Nova's libvirt driver with accelerators (production computes)."""

from nova.virt.libvirt import driver

from cyborg_nova.virt import extension
from cyborg_nova.virt import guest


# The provider mixin first: its spawn programs the FPGAs before the
# guest mixin records the units and builds the guest.
class LibvirtDriver(extension.AcceleratorProviderMixin,
                    guest.GuestAcceleratorsMixin,
                    driver.LibvirtDriver):
    """``compute_driver = cyborg_nova.LibvirtDriver``."""
