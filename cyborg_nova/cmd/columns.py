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
