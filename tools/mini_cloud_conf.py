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

"""Configuration files of the mini-cloud's services (see mini_cloud.py).

Each function returns the text of one file from ``c``, the cloud's
settings: ports, paths, passwords and URLs, all on loopback.
"""

import configparser
import io


def ini(sections):
    """An INI file from ``{section: {option: value}}``."""
    parser = configparser.RawConfigParser()
    parser.optionxform = str
    for section, options in sections.items():
        if section != 'DEFAULT':
            parser.add_section(section)
        for key, value in options.items():
            parser.set(section, key, str(value))
    out = io.StringIO()
    parser.write(out)
    return out.getvalue()


def authtoken(c):
    """``[keystone_authtoken]`` of a service validating tokens."""
    return {
        'www_authenticate_uri': c['keystone'],
        'auth_url': c['keystone'],
        'auth_type': 'password',
        'username': 'service-user',
        'password': c['password'],
        'user_domain_name': 'Default',
        'project_name': 'service',
        'project_domain_name': 'Default',
        'service_token_roles_required': 'True',
        'memcached_servers': '',
    }


def service_auth(c, region=True):
    """A ``[placement]``-style section: the service user's credentials."""
    section = {
        'auth_type': 'password',
        'auth_url': c['keystone'],
        'username': 'service-user',
        'password': c['password'],
        'user_domain_name': 'Default',
        'project_name': 'service',
        'project_domain_name': 'Default',
    }
    if region:
        section['region_name'] = 'RegionOne'
    return section


def keystone(c):
    return ini({
        'DEFAULT': {'log_file': c['logs'] + '/keystone.log'},
        'database': {'connection': c['db']('keystone')},
        'token': {'provider': 'fernet'},
        'fernet_tokens': {'key_repository': c['work'] + '/fernet-keys'},
        'credential': {'key_repository': c['work'] + '/credential-keys'},
        'fernet_receipts': {'key_repository': c['work'] + '/fernet-keys'},
    })


def placement(c):
    return ini({
        'DEFAULT': {'log_file': c['logs'] + '/placement.log'},
        'api': {'auth_strategy': 'keystone'},
        'placement_database': {'connection': c['db']('placement'),
                               'sync_on_startup': 'True'},
        'keystone_authtoken': authtoken(c),
    })


def glance(c):
    return ini({
        'DEFAULT': {'log_file': c['logs'] + '/glance.log',
                    'enabled_backends': 'file:file',
                    'bind_host': '127.0.0.1',
                    'image_cache_dir': c['work'] + '/glance-cache'},
        'database': {'connection': c['db']('glance')},
        'glance_store': {'default_backend': 'file'},
        'file': {'filesystem_store_datadir': c['work'] + '/images'},
        'os_glance_staging_store': {
            'filesystem_store_datadir': c['work'] + '/glance-staging'},
        'os_glance_tasks_store': {
            'filesystem_store_datadir': c['work'] + '/glance-tasks'},
        'keystone_authtoken': authtoken(c),
        'paste_deploy': {'flavor': 'keystone'},
        'oslo_concurrency': {'lock_path': c['work'] + '/locks-glance'},
    })


def neutron(c):
    return ini({
        'DEFAULT': {'log_file': c['logs'] + '/neutron.log',
                    'core_plugin': 'ml2',
                    # Neutron's port queries need the port forwarding
                    # models, which only these plugins load.
                    'service_plugins': 'router,port_forwarding',
                    'auth_strategy': 'keystone',
                    'transport_url': c['transport_url'],
                    'api_workers': '1',
                    'rpc_workers': '0',
                    'notify_nova_on_port_status_changes': 'False',
                    'notify_nova_on_port_data_changes': 'False',
                    'api_paste_config': (c['venv']
                                         + '/etc/neutron/api-paste.ini')},
        'database': {'connection': c['mysql']('neutron')},
        'keystone_authtoken': authtoken(c),
        'oslo_concurrency': {'lock_path': c['work'] + '/locks-neutron'},
        'ml2': {'type_drivers': 'flat',
                'tenant_network_types': '',
                'mechanism_drivers': '',
                'extension_drivers': ''},
        'ml2_type_flat': {'flat_networks': '*'},
    })


def nova(c, host=None, profile_root=None, state_dir=None):
    """nova.conf of the controller services, or of one compute."""
    sections = {
        'DEFAULT': {
            'log_file': '%s/nova-%s.log' % (c['logs'], host or 'controller'),
            'transport_url': c['transport_url'],
            'my_ip': '127.0.0.1',
            'state_path': state_dir or c['work'] + '/nova',
            'instances_path': (state_dir or c['work'] + '/nova')
            + '/instances',
            # The Nova-in-L1 flow resizes a server on its one compute
            # (the conductor asks the scheduler for the same host only
            # with this).
            'allow_resize_to_same_host': 'True',
        },
        'api': {'auth_strategy': 'keystone'},
        'wsgi': {'api_paste_config': c['venv'] + '/etc/nova/api-paste.ini'},
        'api_database': {'connection': c['mysql']('nova_api')},
        'database': {'connection': c['mysql']('nova_cell1')},
        'keystone_authtoken': authtoken(c),
        'placement': service_auth(c),
        'neutron': service_auth(c),
        'glance': {'region_name': 'RegionOne'},
        'service_user': dict(service_auth(c, region=False),
                             send_service_user_token='True'),
        'oslo_concurrency': {
            'lock_path': (state_dir or c['work'] + '/nova') + '/locks'},
        'scheduler': {'discover_hosts_in_cells_interval': '-1'},
        'oslo_messaging_notifications': {'driver': 'noop'},
        'cinder': {'os_region_name': 'RegionOne'},
        'vnc': {'enabled': 'False'},
        'os_vif_ovs': {'ovsdb_connection': 'unix:/nonexistent'},
    }
    if host:
        sections['DEFAULT'].update({
            'host': host,
            'compute_driver': 'cyborg_nova.FakeDriverWithoutFakeNodes',
            'resume_guests_state_on_host_boot': 'False',
        })
        sections['cyborg_nova'] = {
            'sysfs_root': profile_root,
            'auto_ready': 'True',
            'state_path': state_dir + '/accelerators.sqlite',
            'bitstream_dir': state_dir + '/bitstreams',
        }
        sections['compute'] = {'resource_provider_association_refresh': '5'}
    else:
        # nova-api checks a flavor's cyborg_nova:bitstream against the
        # library's manifest (cyborg_nova.virt.extra_specs).
        sections['cyborg_nova'] = {
            'bitstream_dir': c['work'] + '/nova/bitstreams'}
    return ini(sections)


def agent(c, host, port, fake_profile=None, fake_tree=None):
    """An agent's configuration, read after its compute's nova.conf.

    With ``fake_profile``, the agent runs the ``fake`` driver over the
    compute's tree (``fake_tree``) instead of the real drivers: the same
    devices, and FPGA programming writes the loaded function into the
    tree, where the compute's next discovery sees it.
    """
    sections = {
        'DEFAULT': {'log_file': '%s/agent-%s.log' % (c['logs'], host)},
        'cyborg_agent': {
            'bind_host': '127.0.0.1',
            'bind_port': port,
            'nodename': host,
            'admin_token': c['agent_admin_token'],
            'reader_token': c['agent_reader_token'],
            'conductor_url': c['conductor'],
            'conductor_token': c['conductor_token'],
            'heartbeat_interval': '5',
            'watch_udev': 'False',
        },
        # Its lifecycle notifications on the cloud's broker (Nova's own
        # stay off: the computes' nova.conf says noop).
        'oslo_messaging_notifications': {
            'driver': 'messagingv2', 'transport_url': c['transport_url']},
    }
    if fake_profile:
        sections['cyborg_nova'] = {'enabled_drivers': 'fake'}
        sections['cyborg_fake'] = {'host_profile': fake_profile,
                                   'tree_path': fake_tree}
    return ini(sections)


def conductor(c):
    return ini({
        'DEFAULT': {'log_file': c['logs'] + '/conductor-lite.log'},
        'cyborg_conductor': {
            'bind_host': '127.0.0.1',
            'bind_port': c['conductor_port'],
            'admin_token': c['conductor_token'],
            # The admin token: POST /programs relays to the agents'
            # POST /program, which needs the admin role.
            'agent_token': c['agent_admin_token'],
        },
        'database': {'connection': 'sqlite:///%s/conductor.sqlite'
                     % c['work']},
        'placement': service_auth(c),
    })


def tempest(c, expected_rcs, expected_traits):
    return ini({
        'DEFAULT': {'log_file': c['logs'] + '/tempest.log'},
        'auth': {
            'use_dynamic_credentials': 'True',
            'admin_username': 'admin',
            'admin_password': c['password'],
            'admin_project_name': 'admin',
            'admin_domain_name': 'Default',
            'tempest_roles': 'member',
        },
        'identity': {
            'uri_v3': c['keystone'] + '/v3',
            'auth_version': 'v3',
            'region': 'RegionOne',
        },
        'identity-feature-enabled': {'api_v2': 'False'},
        'compute': {
            'image_ref': c['image_id'],
            'image_ref_alt': c['image_id'],
            'flavor_ref': c['flavor_id'],
            'flavor_ref_alt': c['flavor_id'],
            'build_timeout': '120',
            'build_interval': '1',
            'region': 'RegionOne',
        },
        'compute-feature-enabled': {
            'console_output': 'False',
            'resize': 'False',
        },
        'validation': {'run_validation': 'False'},
        'placement': {'min_microversion': '1.0',
                      'max_microversion': '1.39'},
        'service_available': {
            'cyborg_nova': 'True',
            'nova': 'True',
            'glance': 'True',
            'placement': 'True',
            'neutron': 'False',
            'cinder': 'False',
            'swift': 'False',
        },
        'oslo_concurrency': {'lock_path': c['work'] + '/tempest/locks'},
        'accelerators': {
            'conductor_endpoint': c['conductor'],
            'conductor_token': c['conductor_token'],
            'expected_resource_classes': ','.join(expected_rcs),
            'expected_traits': ','.join(expected_traits),
            'capacity_flavor': 'accel.fpga.intel',
            'reprogramming': 'True',
            'fpga_image': c['fpga_image'],
            'fpga_image_function_trait': c['fpga_image_function_trait'],
        },
    })
