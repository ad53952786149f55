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

"""Configuration of cyborg-nova.

Nothing is registered at import time: callers pass their ``ConfigOpts``
to :func:`register_opts` (nova-compute passes Nova's own ``CONF``).
"""

from oslo_config import cfg

from cyborg_nova.conf import aer
from cyborg_nova.conf import cyborg_nova
from cyborg_nova.conf import scrub


def register_opts(conf: cfg.ConfigOpts) -> None:
    cyborg_nova.register_opts(conf)
    aer.register_opts(conf)
    scrub.register_opts(conf)
