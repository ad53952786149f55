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

"""Column types: readable in tables, structured in JSON and YAML."""

from cliff import columns


class ListColumn(columns.FormattableColumn):
    """A list: one item per line in tables, a real list in JSON/YAML."""

    def human_readable(self):
        return '\n'.join(str(item) for item in self._value)

    def machine_readable(self):
        return list(self._value)


class InventoryColumn(columns.FormattableColumn):
    """{resource class: {total, reserved, used}}: a line per class."""

    def human_readable(self):
        return '\n'.join(
            '%s: %d used of %d, %d reserved'
            % (rc, inv['used'], inv['total'], inv['reserved'])
            for rc, inv in sorted(self._value.items()))

    def machine_readable(self):
        return dict(self._value)
