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

"""The contract every accelerator driver implements.

A driver knows one family of hardware. It is loaded by name from the
``cyborg_nova.drivers`` entry-point namespace, declares its own options
under its own group (``[cyborg_<name>]``), and is handed the host's PCI
snapshot each discovery cycle. Only :meth:`AcceleratorDriver.discover` is
abstract; every other hook has a safe default so a discovery-only driver
stays small. The library asks these hooks whatever a family does
differently (make a unit for a guest, a device setting, what a reboot
lost), and never branches on a driver's name. Installing or uninstalling
a driver on a host changes nothing on its devices (see
:mod:`cyborg_nova.lifecycle`), so the contract has no setup or teardown
step.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import ClassVar, Iterable, Iterator

from oslo_config import cfg

from cyborg_drivers import device as device_model
from cyborg_drivers import sysfs


class DriverError(Exception):
    """A driver cannot do what it was asked; the message says why."""


class NotSupported(DriverError):
    """The driver does not implement this operation for its hardware."""


class UnitError(DriverError):
    """A unit cannot be made ready for a guest; the message names it."""


#: The scrub step of every family: the kernel's reset of the function.
SCRUB_FLR = 'flr'


@dataclasses.dataclass(frozen=True)
class ConfigProblem:
    """What is wrong with one of a driver's options, for an operator.

    See :meth:`AcceleratorDriver.check_options` and
    :meth:`AcceleratorDriver.check_host`.
    """

    #: The option of the driver's group; None for the group as a whole.
    option: str | None
    #: What is wrong, for ``cyborg-nova config-check``'s line.
    message: str
    #: False: the driver cannot do what the option says (an error);
    #: True: it can, but that is probably not what was meant.
    warning: bool = False


class PciOps:
    """The privileged PCI writes of every family, through privsep.

    Tests put an object with the same methods in its place.
    """

    def reset_function(self, address: str) -> str:
        """Reset the function (:func:`privsep.pci.reset_function`)."""
        # Imported here: loading a driver starts no privsep daemon.
        import privsep.pci
        return privsep.pci.reset_function(address)


class AcceleratorDriver(abc.ABC):
    """Base class of accelerator drivers.

    Subclasses set :attr:`name` (the entry-point name) and, if they take
    options, :attr:`CONFIG_OPTS`; the options are registered under
    :meth:`group_name` before the driver is instantiated.
    """

    #: Entry-point name; also names the option group.
    name: ClassVar[str] = ''
    #: Options of this driver, registered under ``[cyborg_<name>]``.
    CONFIG_OPTS: ClassVar[list[cfg.Opt]] = []
    #: True if the driver finds nothing until an operator configures it;
    #: such drivers are not run by ``discover`` unless named.
    needs_config: ClassVar[bool] = False
    #: One-line description for ``driver-list``.
    description: ClassVar[str] = ''
    #: False for a driver whose devices are not on this host's PCI bus
    #: (the fake driver's host profile): Nova's device_spec cannot
    #: clash with them.
    on_host_bus: ClassVar[bool] = True
    #: Names of the settings its devices take (:meth:`apply_setting`),
    #: e.g. ``('services',)``; none by default.
    SETTINGS: ClassVar[tuple[str, ...]] = ()
    #: The steps :meth:`scrub` runs on a freed unit, in order (``[cyborg_scrub]
    #: steps`` may pick fewer).
    SCRUB_STEPS: ClassVar[tuple[str, ...]] = (SCRUB_FLR,)

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self.conf = conf

    @classmethod
    def group_name(cls) -> str:
        return 'cyborg_%s' % cls.name

    @property
    def options(self):
        """This driver's option group of the config it was given."""
        return getattr(self.conf, self.group_name())

    def accelerator(self, snapshot: sysfs.PciSnapshot,
                    function: sysfs.PciFunction,
                    **fields) -> device_model.Accelerator:
        """An accelerator at ``function`` with its PCI identity filled in."""
        address = function.address
        return device_model.Accelerator(
            address=address,
            driver=self.name,
            vendor_id=function.vendor_id,
            product_id=function.product_id,
            class_code=function.class_hex,
            subsystem_vendor_id=_id(function.subsystem_vendor),
            subsystem_product_id=_id(function.subsystem_device),
            numa_node=snapshot.numa_node(address),
            iommu_group=snapshot.iommu_group(address),
            kernel_driver=function.driver,
            **fields)

    def claims(self, function: sysfs.PciFunction) -> bool:
        """Whether this driver may report ``function`` (no I/O allowed).

        Called for every function on the bus each cycle, so it looks only
        at the identity already read (vendor, device, class, driver). The
        VFs of a claimed SR-IOV PF are taken as its units without being
        read one by one. The default claims everything, which is correct
        but makes the bus walk read every VF.
        """
        return True

    def physical_functions(self, snapshot: sysfs.PciSnapshot
                           ) -> Iterator[sysfs.PciFunction]:
        """The functions this driver claims, less SR-IOV VFs.

        VFs are units of their PF's accelerator, never accelerators of
        their own. A claimed VF is reported as a problem when its PF has
        vanished, or when this driver does not claim the PF (an operator
        matcher naming the VF's ids, e.g. ``[cyborg_generic]
        device_spec``): its VFs would otherwise be silently left out.
        """
        for function in snapshot:
            if not self.claims(function):
                continue
            if snapshot.is_vf(function.address):
                self._orphan_vf(snapshot, function)
                continue
            yield function

    def _orphan_vf(self, snapshot: sysfs.PciSnapshot,
                   vf: sysfs.PciFunction) -> None:
        """Record why a claimed VF is not a unit of a claimed PF, if so."""
        address = vf.address
        pf = snapshot.physfn(address)
        if pf is None or not snapshot.exists(pf):
            snapshot.problem(address, 'VF whose PF %s is gone' % pf)
            return
        parent = snapshot.lookup(pf)
        if parent is None:
            snapshot.problem(address, 'VF whose PF %s cannot be read' % pf)
        elif not self.claims(parent):
            snapshot.problem(
                address, 'matches VF %s:%s of PF %s (%s:%s), which the %s '
                'driver does not claim; name the PF\'s ids: VFs are reported '
                'as units of their PF' % (
                    vf.vendor_id, vf.product_id, pf, parent.vendor_id,
                    parent.product_id, self.name))

    @staticmethod
    def vf_units(snapshot: sysfs.PciSnapshot, address: str
                 ) -> tuple[device_model.SriovInfo | None, tuple[str, ...]]:
        """SR-IOV state of a PF and the VFs that exist as functions now."""
        info = snapshot.sriov(address)
        if info is None:
            return None, ()
        return info, info.vf_addresses

    def is_configured(self) -> bool:
        """Whether an operator gave the configuration the driver needs.

        Drivers with :attr:`needs_config` override this so callers can
        tell "configured, found nothing" from "not configured".
        """
        return True

    def check_options(self) -> list[ConfigProblem]:
        """What is wrong with this driver's options, beyond their types.

        oslo.config checks each value's type; a driver checks their form
        and how they go together (``cyborg-nova config-check``, and
        nova-compute and the agent at start). Reads no sysfs; nothing
        by default.
        """
        return []

    def check_host(self, sysfs_root: str) -> list[ConfigProblem]:
        """What the options ask for that the host's sysfs does not offer.

        Asked after :meth:`check_options` found no error and a discovery
        under ``sysfs_root`` ran (the devices it found or left out are
        reported apart); e.g. a type no device offers. Reads sysfs,
        writes nothing; nothing by default.
        """
        return []

    @abc.abstractmethod
    def discover(self, snapshot: sysfs.PciSnapshot
                 ) -> list[device_model.Accelerator]:
        """Return the accelerators of this driver's family in ``snapshot``.

        Must not raise for one malformed device: record it with
        ``snapshot.problem(address, reason)`` (or report it in the
        accelerator's ``problems``) and go on with the rest.

        :param snapshot: the host's PCI functions, read once per cycle.
        :returns: accelerators, each with its assignable units.
        :raises DriverError: only when the driver cannot run at all, e.g.
            its configuration is invalid; the message names the option.
        """

    def health(self, accelerator: device_model.Accelerator,
               snapshot: sysfs.PciSnapshot) -> list[str]:
        """Return the reasons ``accelerator`` is unhealthy (empty: healthy).

        The default finds nothing wrong; drivers override it where the
        hardware exposes an error state in sysfs.

        :raises DriverError: if the health state cannot be read at all.
        """
        return []

    def program(self, accelerator: device_model.Accelerator,
                region: str, bitstream: str) -> None:
        """Load ``bitstream`` into ``region`` of an FPGA.

        :raises NotSupported: the driver's hardware is not programmable.
        :raises DriverError: programming failed.
        """
        raise NotSupported('%s cannot program devices' % self.name)

    def offered(self, accelerator: device_model.Accelerator) -> list[str]:
        """What a tenant can ask of ``accelerator``, as service-list shows.

        E.g. ``sym`` and ``dc`` of a QAT device, ``vGPU nvidia-222``,
        ``function <id>`` of an FPGA region. Reads no option. Empty (the
        default): the whole device.
        """
        return []

    # -- units given to guests ---------------------------------------------

    @classmethod
    def unit_ops(cls) -> object | None:
        """The privileged writes of :meth:`prepare_units` and friends.

        An object whose methods go through the family's own privsep
        module (imported when first called, so that loading the driver
        loads no privsep daemon); callers may pass a fake in its place.

        :returns: None (the default) when the family makes nothing.
        """
        return None

    def prepare_units(self, sysfs_root: str,
                      accelerator: device_model.Accelerator,
                      units: Iterable[str], ops: object | None = None
                      ) -> list[str]:
        """Make ``units`` of ``accelerator`` usable by a guest; those made.

        Called each time a guest is given units (spawn, a move's
        destination, a hard reboot after the host lost them), so units
        that are ready already are left alone. The default makes nothing:
        a PCI function is given to the guest as it is. Reads no option:
        the library may ask a driver loaded without the host's
        configuration.

        :param ops: the writes to use (:meth:`unit_ops` when None).
        :raises UnitError: a unit could not be made (the message names
            it); units made before it stay, freed with the allocation.
        """
        return []

    def clear_unit(self, sysfs_root: str, unit: str,
                   ops: object | None = None) -> bool:
        """Undo what :meth:`prepare_units` made of a freed ``unit``.

        Asked of every driver that makes units, for units of any family:
        one that is not this family's, or needs nothing, is left alone.
        Reads no option, as :meth:`prepare_units`.

        :param ops: the writes to use (:meth:`unit_ops` when None).
        :returns: whether anything was undone.
        :raises DriverError: the unit could not be undone (the caller
            logs it and goes on; the next guest gets it as it is).
        """
        return False

    def unit_hostdev(self, accelerator: device_model.Accelerator,
                     unit: str) -> str:
        """How ``unit`` of ``accelerator`` goes into a guest.

        One of :data:`~cyborg_drivers.device.HOSTDEV_KINDS`, recorded
        with the unit when it is given, so building the guest reads no
        sysfs. The default (:func:`~cyborg_drivers.device.
        default_hostdev`): a PCI function libvirt binds to vfio-pci, or a
        mediated device by its uuid. Reads no option.
        """
        return device_model.default_hostdev(unit)

    def hotplug_refusal(self, accelerator: device_model.Accelerator
                        ) -> str | None:
        """Why ``accelerator``'s units cannot be plugged into a running guest.

        None (the default): they can. A family whose units must be made
        before a guest starts (e.g. a vGPU the guest's firmware has to
        see) says why not; ``cyborg-nova attach`` refuses with it.
        """
        return None

    def migratable(self, accelerator: device_model.Accelerator,
                   unit: str) -> bool:
        """Whether a guest can keep ``unit`` through a live migration.

        No by default: a device's state cannot be moved between hosts
        unless its family says how.
        """
        return False

    def scrub(self, sysfs_root: str, accelerator: device_model.Accelerator,
              unit: str, step: str, ops: object | None = None) -> str:
        """Run scrub ``step`` on freed ``unit`` before another guest gets it.

        ``step`` is one of :attr:`SCRUB_STEPS`; the library runs them in
        that order, each under a timeout, after :meth:`clear_unit`.
        Every family has ``flr``: the kernel's reset of a unit that is a
        PCI function (``reset``, function-level first); a mediated
        device has nothing to reset (it was removed when freed). A
        family adding steps calls this for ``flr``, which reads no
        option; a family's own step may read its driver's options (the
        FPGAs' ``scrub_bitstream``).

        :param ops: the privileged writes (:class:`PciOps` when None).
        :returns: what was done, for the log.
        :raises NotSupported: the family has no such step.
        :raises Exception: the step failed (privsep's errors included);
            the message says why. The unit stays held, its device fenced.
        """
        if step != SCRUB_FLR:
            raise NotSupported('%s units have no scrub step %r (steps: %s)'
                               % (self.name, step,
                                  ', '.join(self.SCRUB_STEPS)))
        if not device_model.is_pci_address(unit):
            return 'nothing to reset: %s is a mediated device' % unit
        methods = (ops or PciOps()).reset_function(unit)
        return 'reset %s (%s)' % (unit, methods or "the kernel's method")

    # -- device settings ---------------------------------------------------

    def has_setting(self, accelerator: device_model.Accelerator,
                    setting: str) -> bool:
        """Whether ``accelerator`` takes ``setting`` at all, if not now.

        False for every setting by default.
        """
        return False

    def read_setting(self, accelerator: device_model.Accelerator,
                     setting: str) -> str | None:
        """The value of ``setting`` discovery found; None if it has none."""
        return None

    def check_setting(self, sysfs_root: str,
                      accelerator: device_model.Accelerator, setting: str,
                      value: str) -> str:
        """``value`` as :meth:`apply_setting` will write it, if taken now.

        Reads only; the caller refuses the change, changing nothing, when
        this raises.

        :raises NotSupported: ``accelerator`` has no such setting (the
            default).
        :raises DriverError: it does not take ``value``, or not now (e.g.
            while it is up); the message says why and what to do.
        """
        raise NotSupported('%s devices have no setting %r'
                           % (self.name, setting))

    def apply_setting(self, address: str, setting: str, value: str,
                      ops: object | None = None) -> str:
        """Write ``setting`` of the device at ``address`` (privileged).

        :param value: as :meth:`check_setting` returned it.
        :param ops: the writes to use (the family's privsep module when
            None).
        :returns: the value written, as the kernel keeps it.
        :raises NotSupported: no such setting (the default).
        :raises ValueError: the privileged helper refused the arguments;
            nothing was written.
        :raises Exception: the helper's other errors (e.g.
            ``privsep.NotPossible``: not now); nothing was written.
        """
        raise NotSupported('%s devices have no setting %r'
                           % (self.name, setting))

    # -- after a host reboot -------------------------------------------------

    def restore(self, sysfs_root: str, address: str,
                ops: object | None = None) -> list[str]:
        """Redo what the host lost at a reboot on the device at ``address``.

        Called at nova-compute's start for each device of this driver the
        host's store knows, after its VF count was written back, before
        guests resume. The default has nothing to redo: the kernel keeps
        the rest, or (vGPUs) a unit is made again when a guest is given
        it. Reads no option, as :meth:`prepare_units`.

        :returns: why the device could not be restored (empty: it was,
            or needed nothing); the caller fences it with the reasons.
        :raises DriverError: the device cannot be read at all.
        """
        return []


def _id(value: int | None) -> str | None:
    return None if value is None else '%04x' % value
