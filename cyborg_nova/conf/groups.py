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

"""Registering an option group of its own in a ``ConfigOpts``."""

from __future__ import annotations

from typing import Sequence

from oslo_config import cfg


def register(conf: cfg.ConfigOpts, group: cfg.OptGroup,
             opts: Sequence[cfg.Opt]) -> None:
    """Register ``opts`` under a copy of ``group`` in ``conf``.

    A copy: oslo.config keeps a registered group object shallowly, so
    registering one module-level group in two ``ConfigOpts`` (Nova's
    CONF and a test's) would share their options and overrides.
    """
    conf.register_group(cfg.OptGroup(group.name, title=group.title,
                                     help=group.help))
    conf.register_opts(opts, group=group.name)
