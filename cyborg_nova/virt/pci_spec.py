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

"""Nova's own reading of ``[pci] device_spec``, for the whitelist commands.

cyborg-nova must match device_spec exactly as nova-compute does, so it
parses it with Nova's code (:class:`nova.pci.whitelist.Whitelist`); this is
the only place that code is imported, in ``virt/`` with the rest of what
imports Nova. The library (:mod:`cyborg_nova.whitelist`) takes it as a
:class:`cyborg_nova.whitelist.SpecParser`.
"""

from __future__ import annotations

import warnings

from oslo_config import cfg

with warnings.catch_warnings():
    # Nova imports eventlet, which warns that it is deprecated: noise on a
    # command's stderr, and not the operator's problem.
    warnings.simplefilter('ignore')
    from nova.conf import pci as nova_pci_conf
    from nova import exception as nova_exception
    from nova.pci import whitelist as nova_whitelist


class NovaSpecParser:
    """:class:`cyborg_nova.whitelist.SpecParser` with Nova's own code."""

    def register_opts(self, conf: cfg.ConfigOpts) -> None:
        """Nova's ``[pci]`` options, deprecated names included."""
        nova_pci_conf.register_opts(conf)

    def parse(self, value: str) -> list:
        """Nova's ``PciDeviceSpec`` objects for one device_spec value.

        :raises ValueError: Nova rejects the value; says why.
        """
        try:
            return nova_whitelist.Whitelist([value]).specs
        except nova_exception.NovaException as exc:
            raise ValueError(str(exc)) from exc
