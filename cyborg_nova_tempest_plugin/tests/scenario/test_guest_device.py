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

"""The accelerator a server holds is a PCI device inside the guest."""

from tempest.common import utils
from tempest import config
from tempest.lib import decorators

from cyborg_nova_tempest_plugin.tests import base

CONF = config.CONF

#: Each PCI device of the guest as ``<vendor> <device>``, e.g.
#: ``0x10de 0x1eb8``: sysfs, so any image with a shell will do.
LIST_PCI_IDS = ('for d in /sys/bus/pci/devices/*; do '
                'echo "$(cat $d/vendor) $(cat $d/device)"; done')


def _hex_id(value):
    """``'0x10DE'`` and ``'10de'`` alike as ``'10de'``."""
    value = value.strip().lower()
    return value[2:] if value.startswith('0x') else value


class GuestDeviceTest(base.ConductorMixin, base.BaseAcceleratorScenarioTest):
    """Log in to a server with a GPU and find the GPU on its PCI bus."""

    @classmethod
    def skip_checks(cls):
        super(GuestDeviceTest, cls).skip_checks()
        if not CONF.accelerators.guest_device_check:
            raise cls.skipException(
                'checking the device inside the guest needs real '
                'accelerators and a guest OS image that accepts SSH logins '
                '([accelerators] guest_device_check = False)')
        if not CONF.validation.run_validation:
            raise cls.skipException(
                'checking the device inside the guest needs SSH to the '
                'guest ([validation] run_validation = False)')

    @decorators.idempotent_id('3c7f1a9e-6b2d-4d58-8e03-5a9c1f7b2d34')
    @utils.services('compute', 'network')
    def test_gpu_visible_in_guest(self):
        """The guest's PCI bus has the vendor (and product) of the GPU.

        The ids come from the conductor-lite's ``GET /hardware`` entry of
        the provider the server holds; a whole device (total 1) shows
        both ids, a unit of a shared device at least its vendor's.
        """
        flavor, groups = self.accelerator_flavor('gpu_flavor')
        self.require_candidates(flavor, groups)
        keypair = self.create_keypair()
        security_group = self.create_security_group()
        server = self.create_server(
            flavor=flavor['id'], keypair=keypair, wait_until='SSHABLE',
            security_groups=[{'name': security_group['name']}])
        held = self.check_server_accelerators(server['id'], groups)
        entries = {e['uuid']: e for e in
                   self.conductor.list_hardware()['hardware']}
        ssh = self.get_remote_client(
            self.get_server_ip(server),
            username=CONF.validation.image_ssh_user,
            private_key=keypair['private_key'], server=server)
        in_guest = {tuple(_hex_id(part) for part in line.split())
                    for line in ssh.exec_command(LIST_PCI_IDS).splitlines()
                    if len(line.split()) == 2}
        for rp_uuid, rp in held.items():
            entry = entries.get(rp_uuid)
            self.assertIsNotNone(entry, 'the conductor-lite does not list '
                                 '%s' % rp['name'])
            vendor = _hex_id(entry['pci']['vendor_id'])
            product = _hex_id(entry['pci']['product_id'])
            if entry['placement']['total'] == 1:
                self.assertIn((vendor, product), in_guest)
            else:
                self.assertIn(vendor, {v for v, _ in in_guest})
