"""Tests inside Nova's own functional harness (run in their own process).

Nova's harness patches eventlet when ``nova.tests`` is imported, so these
tests run in a pytest invocation of their own (see tools/run-tests.sh),
never together with the project's threaded services.
"""

# Nova's harness must patch eventlet before anything else of Nova loads.
import nova.tests  # noqa: F401
