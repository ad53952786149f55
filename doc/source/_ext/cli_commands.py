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

"""``.. autoprogram-cliff-current:: NAMESPACE``: the commands, less old names.

cliff's ``autoprogram-cliff`` documents every entry point of a namespace,
the deprecated aliases of renamed commands included (under their old
names). This one leaves out the commands whose class is ``deprecated``
(as ``cyborg-nova --help`` does); the CLI page lists the old names on
their own.
"""

from __future__ import annotations

from cliff import sphinxext


class CurrentCommands(sphinxext.AutoprogramCliffDirective):
    """``autoprogram-cliff`` of a namespace without its deprecated names."""

    def _load_commands(self):
        return {name: cls for name, cls in super()._load_commands().items()
                if not getattr(cls, 'deprecated', False)}


def setup(app):
    app.add_directive('autoprogram-cliff-current', CurrentCommands)
    return {'version': '1.0', 'parallel_read_safe': True,
            'parallel_write_safe': True}
