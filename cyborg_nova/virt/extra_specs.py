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

"""The ``cyborg_nova:`` flavor extra specs, validated by Nova's API.

Registered through Nova's ``nova.api.extra_spec_validators`` entry point,
so ``openstack flavor set --property cyborg_nova:...`` is checked when an
operator sets it (compute API microversion 2.86 and later): a misspelled
key is refused because the namespace is known, and a bitstream name must
be an entry of the library at ``[cyborg_nova] bitstream_dir`` as the
nova-api host sees it (its ``manifest.json`` is enough there).
"""

from __future__ import annotations

from nova.api.validation.extra_specs import base
import nova.conf
from nova import exception

from cyborg_drivers import bitstreams
from cyborg_nova import conf as cn_conf

BITSTREAM = 'cyborg_nova:bitstream'


class _LibraryEntry(base.ExtraSpecValidator):
    """A value that must name an entry of the bitstream library."""

    def validate(self, name, value):
        super().validate(name, value)
        conf = nova.conf.CONF
        cn_conf.register_opts(conf)
        directory = conf.cyborg_nova.bitstream_dir
        try:
            entries = bitstreams.library(directory)
        except bitstreams.InvalidManifest as exc:
            raise exception.ValidationError(
                "Validation failed; extra spec '%s': the bitstream library "
                "cannot be read: %s" % (name, exc))
        if value not in entries:
            known = ', '.join(sorted(entries)) or 'none'
            raise exception.ValidationError(
                "Validation failed; extra spec '%s': '%s' is not a "
                "bitstream of the library %s (entries: %s)"
                % (name, value, bitstreams.manifest_path(directory), known))


EXTRA_SPEC_VALIDATORS = [
    _LibraryEntry(
        name=BITSTREAM,
        description=(
            'Program the FPGA the instance is given with this bitstream '
            'before the guest starts, unless it is loaded already. Ask for '
            'the FPGA and its region in the same flavor, e.g. '
            '``resources:FPGA=1`` and '
            '``trait:CUSTOM_FPGA_REGION_INTEL_<interface id>=required``.'
        ),
        value={
            'type': str,
            'description': 'The name of an entry of the bitstream library '
                           '(``[cyborg_nova] bitstream_dir``/manifest.json).',
            'pattern': bitstreams.ENTRY_PATTERN,
        },
    ),
]


def register():
    return EXTRA_SPEC_VALIDATORS
