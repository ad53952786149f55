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

"""The plugin's options in ``tempest.conf`` (not ``nova.conf``).

``[service_available] cyborg_nova`` switches every test of the plugin on;
``[accelerators]`` says where the conductor-lite is, which flavors ask
for accelerators and what the cloud is expected to report.
"""

from oslo_config import cfg

service_option = cfg.BoolOpt(
    'cyborg_nova',
    default=False,
    help="""
Whether cyborg-nova runs in the cloud under test: nova-compute with the
cyborg-nova compute driver, its agents and the conductor-lite. Every
test of the cyborg-nova plugin is skipped while this is False.
""")

accelerators_group = cfg.OptGroup(
    name='accelerators',
    title='cyborg-nova accelerator options',
    help='What the cyborg-nova tests need to know about the cloud.')

AcceleratorsGroup = [
    cfg.StrOpt(
        'conductor_endpoint',
        help="""
URL of the cyborg-nova conductor-lite's REST API, such as
``http://controller:6667``. Unset: the tests of the conductor-lite are
skipped.

Related options:

* ``conductor_token``
"""),
    cfg.StrOpt(
        'conductor_token',
        secret=True,
        help="""
The token the conductor-lite accepts with the ``admin`` role: its
``[cyborg_conductor] admin_token``. Sent as ``X-Auth-Token``.

Related options:

* ``conductor_endpoint``
"""),
    cfg.StrOpt(
        'fpga_flavor',
        default='accel.fpga.intel',
        help="""
Name or id of a flavor that asks for an Intel FPGA
(``resources:FPGA=1``, ``trait:CUSTOM_FPGA_INTEL=required``). Empty:
tests that boot with it are skipped. The default is the flavor devstack
creates.
"""),
    cfg.StrOpt(
        'xilinx_flavor',
        default='accel.fpga.xilinx',
        help="""
Name or id of a flavor that asks for an AMD/Xilinx FPGA
(``resources:FPGA=1``, ``trait:CUSTOM_FPGA_XILINX=required``). Empty:
tests that boot with it are skipped.
"""),
    cfg.StrOpt(
        'gpu_flavor',
        default='accel.gpu.t4',
        help="""
Name or id of a flavor that asks for a GPU (``resources:PGPU=1`` or
``resources:VGPU=1`` and a ``CUSTOM_NVIDIA_<PID>`` trait). Empty: tests
that boot with it are skipped.
"""),
    cfg.StrOpt(
        'qat_flavor',
        default='accel.qat.2',
        help="""
Name or id of a flavor that asks for Intel QAT units
(``resources:CUSTOM_QAT=N``). Empty: tests that boot with it are
skipped.
"""),
    cfg.StrOpt(
        'capacity_flavor',
        default='accel.fpga.intel',
        help="""
Name or id of the accelerator flavor the capacity test boots until no
accelerator is left: pick the one with the fewest devices in the cloud.
Its extra specs must have one accelerator request group. Empty: the
capacity test is skipped.

Related options:

* ``max_capacity_servers``
"""),
    cfg.IntOpt(
        'max_capacity_servers',
        default=4,
        min=1,
        help="""
The most servers the capacity test boots to use up the free accelerators
of ``capacity_flavor``. A cloud with more free capacity than that skips
the test.
"""),
    cfg.ListOpt(
        'expected_resource_classes',
        default=[],
        help="""
Resource classes that at least one accelerator provider in the cloud
must have in its inventory, such as ``FPGA,PGPU,CUSTOM_QAT``. Empty: no
particular resource class is expected, and tests that look at providers
are skipped in a cloud without any.
"""),
    cfg.ListOpt(
        'expected_traits',
        default=[],
        help="""
Traits that at least one accelerator provider in the cloud must have,
such as ``CUSTOM_FPGA_INTEL,CUSTOM_NVIDIA_1EB8,CUSTOM_QAT_SYM``.
``OWNER_CYBORG`` is always checked, on every accelerator provider.
"""),
    cfg.ListOpt(
        'operator_resource_classes',
        default=[],
        help="""
Resource classes given in the ``resource_class`` of ``generic`` driver
``device_spec`` entries: accepted on accelerator providers besides the
documented ones (``PGPU``, ``VGPU``, ``FPGA``, ``CUSTOM_QAT``,
``CUSTOM_NIC``, ``CUSTOM_PCI``).
"""),
    cfg.BoolOpt(
        'reprogramming',
        default=False,
        help="""
Whether the conductor-lite can reprogram FPGAs (``POST /programs``).
False: the reprogramming tests are skipped.

Related options:

* ``fpga_image``, ``fpga_image_function_trait``
"""),
    cfg.StrOpt(
        'fpga_image',
        help="""
The bitstream the reprogramming tests load: an entry of the computes'
bitstream library (or a file name under their ``[cyborg_nova]
bitstream_dir``), as the conductor-lite's ``POST /programs`` takes it.
"""),
    cfg.StrOpt(
        'fpga_image_function_trait',
        help="""
The function trait an FPGA reports once ``fpga_image`` is loaded, such
as ``CUSTOM_FPGA_FUNCTION_ID_INTEL_<AFU id>``.
"""),
    cfg.BoolOpt(
        'guest_device_check',
        default=False,
        help="""
Whether to log in to a server booted with ``gpu_flavor`` and look for
the accelerator's PCI vendor and product ids in the guest's
``/sys/bus/pci/devices``. Needs real accelerators (not the fake driver),
``[validation] run_validation = True`` and an image that accepts SSH
logins. False: the test is skipped.
"""),
]


def register_opts(conf):
    """Register the plugin's options on Tempest's ``conf``."""
    conf.register_opt(service_option, group='service_available')
    conf.register_group(accelerators_group)
    conf.register_opts(AcceleratorsGroup, group=accelerators_group)


def list_opts():
    """The plugin's options by group, for Tempest's sample config."""
    return [
        (accelerators_group.name, AcceleratorsGroup),
        ('service_available', [service_option]),
    ]
