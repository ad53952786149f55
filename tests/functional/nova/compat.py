"""What differs between the supported Nova releases, in one place.

cyborg-nova's own code takes the same path on every supported release
(Nova 31, 2025.1, to Nova 34, 2026.2); the Nova-harness tests see these
differences in what Nova itself does.
"""

from nova.scheduler import request_filter

# Nova 34 (2026.2) added the OWNER_NOVA prefilter (root_required=OWNER_NOVA
# on every allocation candidates query); Nova 31, 32 and 33 lack it.
HAS_OWNER_NOVA_FILTER = hasattr(request_filter, 'owner_nova_filter')
