# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.

"""Sphinx configuration of the cyborg-nova documentation.

Build with ``tox -e docs`` or
``sphinx-build -W -b html doc/source doc/build/html``.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))

# The package is normally installed (tox installs it); this also lets a
# plain sphinx-build from a source checkout import it.
sys.path.insert(0, TOP)
# Local extensions (openapi_table renders the REST API reference,
# cli_commands the commands of cyborg-nova without their old names).
sys.path.insert(0, os.path.join(HERE, '_ext'))

# -- General -----------------------------------------------------------------

project = 'cyborg-nova'
copyright = 'cyborg-nova developers'
author = 'cyborg-nova developers'

extensions = [
    'sphinx.ext.autodoc',
    'cliff.sphinxext',
    'oslo_config.sphinxext',
    'oslo_config.sphinxconfiggen',
    'openapi_table',
    'cli_commands',
]

master_doc = 'index'
exclude_patterns = ['_build']
pygments_style = 'sphinx'

# -- autodoc -----------------------------------------------------------------

autodoc_member_order = 'bysource'
autodoc_typehints = 'signature'
autodoc_default_options = {
    'members': True,
    'show-inheritance': True,
}

# -- cliff.sphinxext ----------------------------------------------------------

# The output formatter options cliff adds to every listing command are
# described once, by hand, in cli/index.rst.
autoprogram_cliff_ignored = [
    '--help', '--format', '--column', '--max-width', '--fit-width',
    '--print-empty', '--noindent', '--quote', '--sort-column',
    '--sort-ascending', '--sort-descending',
]

# -- oslo_config.sphinxconfiggen ---------------------------------------------

# Writes _static/cyborg-nova.conf.sample, the same file
# "tox -e genconfig" writes to etc/.
config_generator_config_file = [
    (os.path.join(TOP, 'etc', 'oslo-config-generator', 'cyborg-nova.conf'),
     '_static/cyborg-nova'),
]

# -- HTML --------------------------------------------------------------------

html_theme = 'alabaster'
html_static_path = ['_static']
html_title = 'cyborg-nova documentation'
