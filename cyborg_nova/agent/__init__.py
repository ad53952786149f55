"""cyborg-nova-agent: the per-host agent of the internal API.

One runs on each compute host. It serves the internal REST API
(``/discovery``, ``/hardware``, ``/hello``), keeps the host's accelerators
up to date from udev events and periodic discovery, fences changed devices
in Placement at once, polls out-of-process drivers and heartbeats to the
conductor. Nova's resource tracker stays the writer of the provider tree:
the agent only writes ``reserved`` values Nova's next update computes too.
"""
