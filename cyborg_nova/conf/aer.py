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

"""Options of the ``[cyborg_aer]`` group: what PCIe AER errors do."""

from oslo_config import cfg

from cyborg_nova.conf import groups

GROUP = cfg.OptGroup(
    'cyborg_aer',
    title='PCIe AER health',
    help='What the PCIe Advanced Error Reporting (AER) counters of an '
         'accelerator\'s PCI functions do to the accelerator.')

#: The effects a non-fatal or correctable error rate may have, weakest
#: first, with what each does.
_CHOICES = (
    ('none', 'nothing; the counts are still shown'),
    ('inform', 'the trait CUSTOM_PCIE_AER_ERRORS on the provider and a '
               'notification'),
    ('fence', 'the device set unhealthy (fully reserved), the trait and a '
              'notification'),
)
EFFECTS = tuple(name for name, _ in _CHOICES)

_EFFECT_HELP = """
What %(what)s PCIe AER errors above ``%(rate)s`` do
to the accelerator of the PCI function that reported them:

``none``
    Nothing; the counts are still shown by ``cyborg-nova discover``,
    ``GET /hardware`` and ``cyborg-nova audit``.
``inform``
    The accelerator's resource provider gets the trait
    ``CUSTOM_PCIE_AER_ERRORS`` and an ``accelerator.aer_error``
    notification is sent; it is still offered to the scheduler.
``fence``
    The accelerator is set ``unhealthy`` (its provider fully reserved,
    so no new guest gets it); its provider gets the trait too and an
    ``accelerator.aer_error`` notification is sent.

The effect lasts until the operator clears it with ``cyborg-nova
device-set-state <address> ready``.

Related options:

* ``%(rate)s``, ``enabled``
"""


def _severity_opts(severity, what, per_hour, per_hour_help):
    """The options ``<severity>_effect`` and ``<severity>_per_hour``.

    What ``what`` errors do, and how many of them an hour are allowed
    before they do it (``per_hour`` by default).
    """
    return [
        cfg.StrOpt(
            '%s_effect' % severity,
            default='inform',
            choices=_CHOICES,
            help=_EFFECT_HELP % {'what': what,
                                 'rate': '%s_per_hour' % severity}),
        cfg.IntOpt(
            '%s_per_hour' % severity,
            default=per_hour,
            min=0,
            help=per_hour_help),
    ]


OPTS = [
    cfg.BoolOpt(
        'enabled',
        default=True,
        help="""
Act on the PCIe AER counters of the accelerators' PCI functions.

The counters are read at every discovery (nova-compute's update of its
provider tree, the agent's periodic discovery, and the agent's handling
of a udev event that carries ``ERROR_EVENT``). A fatal error, or the
kernel's uevent of a failed recovery (``ERROR_EVENT=FAILED_RECOVERY``)
whatever the counts, fences the accelerator; non-fatal and correctable
errors above their rates take the effect configured for them. With
``False`` the counters are still read and shown but nothing is done;
effects already taken stay until the operator clears them.

Related options:

* ``nonfatal_effect``, ``correctable_effect``
"""),
    *_severity_opts('nonfatal', 'non-fatal (uncorrectable)', 0, """
How many non-fatal PCIe AER errors a PCI function may report in an hour
before ``nonfatal_effect`` is taken. The default, 0, takes it at the
first one.

Errors are counted from the first read of the function (errors the
kernel counted before, such as those of the boot, do not count) or from
the operator's last clear, in windows of an hour: the effect is taken
when the count grew by more than this within the current window (over a
window longer than an hour, because nothing read the counters for a
while, by more than this many per hour).

Related options:

* ``nonfatal_effect``
"""),
    *_severity_opts('correctable', 'correctable', 100, """
How many correctable PCIe AER errors a PCI function may report in an
hour before ``correctable_effect`` is taken. The kernel sends no udev
event for correctable errors, so they are seen at the next discovery.

Counted as ``nonfatal_per_hour`` counts non-fatal errors.

Related options:

* ``correctable_effect``
"""),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    groups.register(conf, GROUP, OPTS)


def list_opts():
    return {GROUP: OPTS}
