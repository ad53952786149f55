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

"""The ``oslo.config.opts`` entry point: every option, for the sample."""

from cyborg_drivers import loader
from cyborg_nova.conf import aer
from cyborg_nova.conf import agent
from cyborg_nova.conf import conductor
from cyborg_nova.conf import cyborg_nova
from cyborg_nova.conf import privsep as privsep_conf
from cyborg_nova.conf import scrub


def list_opts():
    opts = [(group, options)
            for group, options in cyborg_nova.list_opts().items()]
    opts.extend(aer.list_opts().items())
    opts.extend(agent.list_opts().items())
    opts.extend(conductor.list_opts().items())
    opts.extend(privsep_conf.list_opts().items())
    opts.extend(scrub.list_opts().items())
    opts.extend(loader.list_opts())
    return opts
