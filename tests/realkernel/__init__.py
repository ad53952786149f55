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

"""Tests that run inside L1, a VM with a real kernel and SR-IOV devices.

The ``inside_*.py`` modules are not collected by the usual runs (their
names do not start with ``test_``): ``tools/nested/l1-tests.sh`` runs
them in L1, and ``tests/functional/realkernel/test_real_kernel.py``
boots L1 and reads their report.
"""
