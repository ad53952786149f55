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

"""Tempest tests of cyborg-nova: accelerators through Nova and Placement.

Installed with cyborg-nova and registered with Tempest through the
``tempest.test_plugins`` entry point (:mod:`.plugin`). Nothing here is
imported by cyborg-nova itself, and nothing here imports cyborg-nova:
the tests talk to a cloud through its APIs only, so they run from any
Tempest node.
"""
