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

"""cyborg-nova-agent: the per-host agent of the internal API.

One runs on each compute host. It serves the internal REST API
(``/discovery``, ``/hardware``, ``/hello``), keeps the host's accelerators
up to date from udev events and periodic discovery, fences changed devices
in Placement at once, polls out-of-process drivers and heartbeats to the
conductor. Nova's resource tracker stays the writer of the provider tree:
the agent only writes ``reserved`` values Nova's next update computes too.
"""
