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

"""Entry module for ``[DEFAULT] compute_driver = cyborg_nova.<Driver>``.

Nova loads compute drivers only from under ``nova.virt``; this module is
the one file cyborg-nova installs there. It imports the requested driver
on first use, so choosing ``FakeDriver`` never imports the libvirt
driver. All logic lives in the ``cyborg_nova`` package.
"""

import importlib

_DRIVERS = {
    'LibvirtDriver': 'cyborg_nova.virt.libvirt',
    'FakeDriver': 'cyborg_nova.virt.fake',
    'FakeDriverWithoutFakeNodes': 'cyborg_nova.virt.fake',
    'MediumFakeDriver': 'cyborg_nova.virt.fake',
}


def __getattr__(name):
    if name not in _DRIVERS:
        raise AttributeError('module %r has no attribute %r'
                             % (__name__, name))
    return getattr(importlib.import_module(_DRIVERS[name]), name)
