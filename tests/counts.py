"""Counts a test reports (inputs tried, faults injected, requests made).

:func:`record` prints a line (seen with ``-s`` or in a failure's captured
output) and keeps it; ``tests/conftest.py`` shows every kept line in
pytest's terminal summary, so a plain ``pytest -q`` run, CI's included,
prints them.
"""

LINES: list = []


def record(line: str) -> str:
    """Print and keep ``line``; return it."""
    line = line.strip('\n')
    print('\n' + line)
    LINES.append(line)
    return line
