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

"""What differs between the supported Nova releases, in one place.

cyborg-nova's own code takes the same path on every supported release
(Nova 31, 2025.1, to Nova 34, 2026.2); the Nova-harness tests see these
differences in what Nova itself does.
"""

from nova.scheduler import request_filter

# Nova 34 (2026.2) added the OWNER_NOVA prefilter (root_required=OWNER_NOVA
# on every allocation candidates query); Nova 31, 32 and 33 lack it.
HAS_OWNER_NOVA_FILTER = hasattr(request_filter, 'owner_nova_filter')
