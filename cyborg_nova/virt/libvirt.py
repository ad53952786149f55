"""Nova's libvirt driver with accelerators (production computes)."""

from nova.virt.libvirt import driver

from cyborg_nova.virt import extension
from cyborg_nova.virt import guest


class LibvirtDriver(guest.GuestAcceleratorsMixin,
                    extension.AcceleratorProviderMixin,
                    driver.LibvirtDriver):
    """``compute_driver = cyborg_nova.LibvirtDriver``."""
