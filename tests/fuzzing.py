"""How long the fuzz tests run: a short CI mode, a longer one on demand.

Each fuzz target has a default number of examples small enough for CI.
``CYBORG_NOVA_FUZZ_EXAMPLES=N`` runs every target with ``N`` examples
instead (and the REST API fuzzers with ``N`` per operation and
generation mode)::

    CYBORG_NOVA_FUZZ_EXAMPLES=5000 .venv/bin/python -m pytest -s \\
        tests/unit/fuzz tests/functional/agent/test_schemathesis.py \\
        tests/functional/conductor/test_schemathesis.py

Every target prints how many inputs it tried (run pytest with ``-s`` or
read the captured output of a failure).
"""

import os

import hypothesis

ENV = 'CYBORG_NOVA_FUZZ_EXAMPLES'


def examples(default: int) -> int:
    """The examples a target runs: ``default``, or the environment's."""
    value = os.environ.get(ENV, '').strip()
    if not value:
        return default
    count = int(value)
    if count < 1:
        raise ValueError('%s must be a positive number, not %r'
                         % (ENV, value))
    return count


def settings(default: int, **kwargs) -> hypothesis.settings:
    """hypothesis settings for a fuzz target of ``default`` examples.

    No deadline (the machine is shared, timings vary), no example
    database (a CI run starts clean; hypothesis prints how to reproduce a
    failure), every health check that is about speed off.
    """
    return hypothesis.settings(
        max_examples=examples(default), deadline=None, database=None,
        suppress_health_check=[hypothesis.HealthCheck.too_slow,
                               hypothesis.HealthCheck.data_too_large,
                               hypothesis.HealthCheck.large_base_example,
                               hypothesis.HealthCheck.
                               function_scoped_fixture],
        **kwargs)


def report(target: str, tried: int, **details) -> str:
    """Print (and return) one line: the target and the inputs tried."""
    extra = ''.join(', %s: %s' % item for item in sorted(details.items()))
    line = 'fuzz %s: %d inputs tried, no crash%s' % (target, tried, extra)
    print('\n' + line)
    return line
