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

"""Sphinx configuration of the cyborg-nova release notes.

Build with ``tox -e releasenotes`` or
``sphinx-build -W -b html releasenotes/source releasenotes/build/html``.
reno reads the notes from the git history, so a note appears only once
it is committed.
"""

# -- General -----------------------------------------------------------------

project = 'cyborg-nova release notes'
copyright = 'cyborg-nova developers'
author = 'cyborg-nova developers'

extensions = [
    'reno.sphinxext',
]

master_doc = 'index'
exclude_patterns = ['_build']
pygments_style = 'sphinx'

# The release notes carry no version of their own.
version = ''
release = ''

# -- HTML --------------------------------------------------------------------

html_theme = 'alabaster'
html_title = 'cyborg-nova release notes'
