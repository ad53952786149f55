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

"""Starting a privsep daemon of cyborg-nova from a caller's own config.

For the callers that run outside a service main() which set up oslo's
global configuration: the commands, and the agent's FPGA programmer.
"""

import importlib
import os
import warnings

from oslo_config import cfg

from cyborg_nova.conf import privsep as privsep_conf


def quiet_import(name: str):
    """Import module ``name`` without its import-time warnings.

    oslo.privsep imports eventlet, which warns that it is deprecated:
    noise on a command's stderr, and not the operator's problem.
    """
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        return importlib.import_module(name)


def start_privsep(conf, context_name: str):
    """The privsep context ``context_name``, reading this command's files.

    oslo.privsep builds the daemon from the global ``cfg.CONF`` (the
    context's section, and the config files it passes to privsep-helper),
    while the command reads its own ConfigOpts; so the global one is
    loaded from the same files, as a service's main() would. Run as root
    without a ``helper_command``, the daemon is forked (it still drops to
    the context's capabilities) instead of being started through sudo.
    """
    priv_context = quiet_import('oslo_privsep.priv_context')
    privsep = quiet_import('privsep')
    privsep_conf.register_opts(cfg.CONF)
    cfg.CONF([], project='nova',
             default_config_files=list(conf.config_file or []),
             default_config_dirs=[])
    context = getattr(privsep, context_name)
    if (os.geteuid() == 0 and not context.conf.helper_command
            and context.channel is None):
        context.start(priv_context.Method.FORK)
    return context
