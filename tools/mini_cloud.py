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

"""A mini-cloud on this machine; run through tools/mini-cloud.sh.

Starts, on loopback only, MariaDB and RabbitMQ (Debian's, as private
instances with their own data directories and ports), Keystone (fernet),
Glance (file store), Placement, Neutron's API (ML2, no agents: Nova asks
it for ports when it deletes a server), Nova's API, conductor and
scheduler, three nova-compute processes with ``compute_driver =
cyborg_nova.FakeDriverWithoutFakeNodes`` (restartable) reading fake sysfs
trees of three host profiles (FPGAs, GPUs, QAT and SR-IOV NICs: a host
for every scenario of the tempest plugin), a cyborg-nova agent per
compute and the conductor-lite. Then it runs the operator's
``openstack`` commands (and, while their server holds an FPGA, kills the
FPGA host's nova-compute with SIGKILL and checks it recovers: see
mini_cloud_crash.py), writes a tempest.conf, runs the project's tempest
plugin tests, and stops every process it started, by PID.

State and logs live in ``--work-dir`` (default ``.mini-cloud`` in the
repository), made afresh on every start.
"""

import argparse
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import mini_cloud_conf as conf
import mini_cloud_crash as crash
import mini_cloud_l1

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The computes: host name and fake host profile.
COMPUTES = [('mc-fpga', 'fpga-host'), ('mc-gpu', 'gpu-host'),
            ('mc-crypto', 'crypto-nic-host')]
#: What the tempest plugin should find in Placement for these profiles.
EXPECTED_RCS = ['FPGA', 'PGPU', 'VGPU', 'CUSTOM_QAT']
EXPECTED_TRAITS = ['CUSTOM_FPGA_INTEL', 'CUSTOM_FPGA_XILINX',
                   'CUSTOM_NVIDIA_1EB8']
#: The flavors the tempest plugin boots with, as an operator creates them.
FLAVORS = [
    ('accel.fpga.intel', ['resources:FPGA=1',
                          'trait:CUSTOM_FPGA_INTEL=required']),
    ('accel.fpga.xilinx', ['resources:FPGA=1',
                           'trait:CUSTOM_FPGA_XILINX=required']),
    ('accel.gpu.t4', ['resources:PGPU=1',
                      'trait:CUSTOM_NVIDIA_1EB8=required']),
    ('accel.qat.2', ['resources:CUSTOM_QAT=2']),
]
#: The bitstream library of the FPGA host: one GBS for its Intel PACs'
#: PR interface, with an AFU neither of them runs yet.
FPGA_INTERFACE_ID = '9346116d-a52d-5ca8-b06a-a9a389ef7c8d'
FPGA_IMAGE_AFU_ID = '0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9'
FPGA_IMAGE = 'mini-cloud-afu'
FPGA_IMAGE_TRAIT = ('CUSTOM_FPGA_FUNCTION_ID_INTEL_'
                    + FPGA_IMAGE_AFU_ID.replace('-', '').upper())
PIDFILE = 'pids'
RABBITMQ_SERVER = '/usr/lib/rabbitmq/bin/rabbitmq-server'


#: Prints the cyborg-nova notifications queued on the broker (its
#: argument), by event, leaving them queued.
NOTIFICATIONS = '''
import collections, json, sys
import kombu
counts = collections.Counter()
with kombu.Connection(sys.argv[1].replace('rabbit://', 'amqp://')) as conn:
    for queue in ('notifications.info', 'notifications.warn'):
        channel = conn.channel()
        while True:
            try:
                message = channel.basic_get(queue, no_ack=False)
            except Exception:
                break
            if message is None:
                break
            body = json.loads(json.loads(message.body)['oslo.message'])
            if body['publisher_id'].startswith('cyborg-nova'):
                counts[body['event_type']] += 1
print('%d from cyborg-nova (%s)' % (sum(counts.values()), ', '.join(
    '%s x%d' % item for item in sorted(counts.items())) or 'none'))
'''


def log(msg):
    print('mini-cloud: %s' % msg, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


class Failure(Exception):
    pass


class Cloud(object):

    def __init__(self, args):
        self.args = args
        self.venv = os.path.abspath(args.venv)
        self.work = os.path.abspath(args.work_dir)
        self.logs = os.path.join(self.work, 'logs')
        self.procs = []
        self.started = time.time()
        self.password = 'mini-cloud-' + os.urandom(6).hex()
        port = {name: free_port() for name in (
            'mysql', 'rabbit', 'rabbit_dist', 'epmd', 'keystone',
            'placement', 'glance', 'neutron', 'nova', 'conductor')}
        self.port = port
        self.mysql_sock = os.path.join(self.work, 'mysql', 'mysqld.sock')
        url = 'http://127.0.0.1:%d'
        self.c = {
            'work': self.work,
            'logs': self.logs,
            'venv': self.venv,
            'password': self.password,
            'keystone': url % port['keystone'],
            'transport_url': 'rabbit://guest:guest@127.0.0.1:%d/'
                             % port['rabbit'],
            'db': self.sqlite,
            'mysql': self.mysql,
            'conductor': url % port['conductor'],
            'conductor_port': port['conductor'],
            'conductor_token': os.urandom(16).hex(),
            'agent_admin_token': os.urandom(16).hex(),
            'agent_reader_token': os.urandom(16).hex(),
            'fpga_image': FPGA_IMAGE,
            'fpga_image_function_trait': FPGA_IMAGE_TRAIT,
        }

    # -- helpers -----------------------------------------------------------

    def sqlite(self, name):
        return 'sqlite:///%s/%s.sqlite' % (self.work, name)

    def mysql(self, name):
        return ('mysql+pymysql://cloud:%s@127.0.0.1:%d/%s?charset=utf8'
                % (self.password, self.port['mysql'], name))

    def bin(self, name):
        return os.path.join(self.venv, 'bin', name)

    def write(self, name, text):
        path = os.path.join(self.work, name)
        with open(path, 'w') as f:
            f.write(text)
        return path

    def env(self, **extra):
        env = dict(os.environ)
        env['PATH'] = os.path.join(self.venv, 'bin') + os.pathsep + env.get(
            'PATH', '')
        env.update(extra)
        return env

    def run(self, *argv, env=None, quiet=True):
        """Run a set-up command; its output goes to setup.log."""
        with open(os.path.join(self.logs, 'setup.log'), 'a') as out:
            out.write('\n$ %s\n' % ' '.join(argv))
            out.flush()
            result = subprocess.run(
                argv, env=env or self.env(), stdin=subprocess.DEVNULL,
                stdout=out if quiet else None,
                stderr=subprocess.STDOUT if quiet else None)
        if result.returncode:
            raise Failure('%s failed (exit %d); see %s/setup.log'
                          % (argv[0], result.returncode, self.logs))

    def start(self, name, argv, env=None):
        """Start a service in its own process group; log to logs/<name>."""
        out = open(os.path.join(self.logs, name + '.out'), 'w')
        proc = subprocess.Popen(argv, env=env or self.env(),
                                stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=self.work)
        out.close()
        self.procs.append((name, proc))
        with open(os.path.join(self.work, PIDFILE), 'a') as f:
            f.write('%d %s\n' % (proc.pid, name))
        return proc

    def wait_for(self, what, check, timeout=120, proc=None):
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            if proc is not None and proc.poll() is not None:
                raise Failure('%s exited (%d); see %s%s'
                              % (what, proc.returncode, self.logs,
                                 self.log_tail(proc)))
            try:
                if check():
                    return
            except (OSError, urllib.error.URLError, ValueError) as e:
                last = e
            time.sleep(0.5)
        # A CI run keeps only this process's output, not the work
        # directory: the service's own last words go with the failure.
        raise Failure('%s not ready after %ds (last probe: %s); see %s%s'
                      % (what, timeout, last or 'no error, not ready',
                         self.logs, self.log_tail(proc)))

    def log_tail(self, proc, lines=25):
        """The end of ``proc``'s log, for a failure message ('' if none)."""
        names = [name for name, p in self.procs if p is proc]
        if not names:
            return ''
        path = os.path.join(self.logs, names[0] + '.out')
        try:
            with open(path, errors='replace') as f:
                tail = f.readlines()[-lines:]
        except OSError:
            return ''
        return '\n--- last lines of %s ---\n%s' % (path, ''.join(tail))

    def port_open(self, port):
        with socket.socket() as s:
            s.settimeout(1)
            return s.connect_ex(('127.0.0.1', port)) == 0

    def http_ok(self, url):
        """True once ``url`` answers below 500.

        A 5xx raises ValueError with what the server said, for
        ``wait_for`` to report.
        """
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return resp.status < 500
        except urllib.error.HTTPError as e:
            if e.code < 500:
                return True
            raise ValueError('HTTP %d: %s' % (
                e.code, e.read(300).decode(errors='replace').strip()))

    def wsgi(self, name, app, port, threads=1, **env):
        """Serve a WSGI application (``module:callable``) with uWSGI.

        uWSGI passes the services no command line of its own (they parse
        ``sys.argv`` with oslo.config), and stops on SIGTERM.
        """
        module, callable_ = app.split(':')
        return self.start(name, [
            self.bin('uwsgi'), '--http-socket', '127.0.0.1:%d' % port,
            '--virtualenv', self.venv, '--module', module,
            '--callable', callable_, '--master', '--processes', '1',
            '--threads', str(threads), '--enable-threads', '--die-on-term',
            '--need-app', '--buffer-size', '65535', '--hook-master-start',
            'unix_signal:15 gracefully_kill_them_all',
            '--add-header', 'Connection: close',
            '--pythonpath', os.path.join(TOP, 'tools')],
            env=self.env(**env))

    # -- keystone's REST API (stdlib only) --------------------------------

    def ks(self, method, path, body=None, token=None):
        data = json.dumps(body).encode() if body is not None else None
        headers = {'Content-Type': 'application/json'}
        if token is not False:
            headers['X-Auth-Token'] = token or self.token
        req = urllib.request.Request(
            self.c['keystone'] + path, data=data, method=method,
            headers=headers)
        with urllib.request.urlopen(req, timeout=60) as resp:
            text = resp.read()
            return resp.headers, (json.loads(text) if text else {})

    def admin_token(self):
        body = {'auth': {
            'identity': {'methods': ['password'], 'password': {'user': {
                'name': 'admin', 'domain': {'id': 'default'},
                'password': self.password}}},
            'scope': {'project': {'name': 'admin',
                                  'domain': {'id': 'default'}}}}}
        headers, _ = self.ks('POST', '/v3/auth/tokens', body, token=False)
        return headers['X-Subject-Token']

    def ks_id(self, collection, name):
        _, body = self.ks('GET', '/v3/%s?name=%s' % (collection, name))
        return body[collection][0]['id']

    # -- the services ------------------------------------------------------

    def start_mariadb(self):
        datadir = os.path.join(self.work, 'mysql')
        self.run('mariadb-install-db', '--no-defaults', '--user=root',
                 '--datadir=' + datadir, '--skip-test-db',
                 '--auth-root-authentication-method=normal')
        proc = self.start('mariadb', [
            'mariadbd', '--no-defaults', '--user=root',
            '--datadir=' + datadir, '--socket=' + self.mysql_sock,
            '--port=%d' % self.port['mysql'], '--bind-address=127.0.0.1',
            '--pid-file=' + os.path.join(datadir, 'mysqld.pid'),
            '--skip-log-bin', '--innodb-flush-log-at-trx-commit=0',
            '--innodb-buffer-pool-size=128M', '--max-connections=500',
            '--character-set-server=utf8mb4',
            '--log-error=' + os.path.join(self.logs, 'mariadb.log')])
        self.wait_for('MariaDB', lambda: os.path.exists(self.mysql_sock),
                      proc=proc)
        sql = ["CREATE USER 'cloud'@'127.0.0.1' IDENTIFIED BY '%s'"
               % self.password]
        for db in ('nova_api', 'nova_cell0', 'nova_cell1', 'neutron'):
            sql.append('CREATE DATABASE %s' % db)
            sql.append("GRANT ALL ON %s.* TO 'cloud'@'127.0.0.1'" % db)
        self.run('mariadb', '--no-defaults', '--socket=' + self.mysql_sock,
                 '-uroot', '-e', '; '.join(sql))

    def start_rabbitmq(self):
        base = os.path.join(self.work, 'rabbitmq')
        os.makedirs(base)
        plugins = os.path.join(base, 'enabled_plugins')
        with open(plugins, 'w') as f:
            f.write('[].\n')
        self.rabbit_env = self.env(
            HOME=base,
            RABBITMQ_NODENAME='mini-cloud-%d@localhost' % self.port['rabbit'],
            RABBITMQ_NODE_IP_ADDRESS='127.0.0.1',
            RABBITMQ_NODE_PORT=str(self.port['rabbit']),
            RABBITMQ_DIST_PORT=str(self.port['rabbit_dist']),
            ERL_EPMD_PORT=str(self.port['epmd']),
            ERL_EPMD_ADDRESS='127.0.0.1',
            RABBITMQ_MNESIA_BASE=base + '/mnesia',
            RABBITMQ_LOG_BASE=self.logs,
            RABBITMQ_ENABLED_PLUGINS_FILE=plugins,
            RABBITMQ_CONFIG_FILE=base + '/rabbitmq',
            RABBITMQ_PID_FILE=base + '/rabbit.pid')
        proc = self.start('rabbitmq', [RABBITMQ_SERVER], env=self.rabbit_env)
        self.wait_for('RabbitMQ', lambda: self.port_open(self.port['rabbit']),
                      timeout=180, proc=proc)

    def start_keystone(self):
        path = self.write('keystone.conf', conf.keystone(self.c))
        manage = [self.bin('keystone-manage'), '--config-file', path]
        self.run(*manage, 'db_sync')
        for repo in ('fernet_setup', 'credential_setup'):
            self.run(*manage, repo, '--keystone-user', 'root',
                     '--keystone-group', 'root')
        url = self.c['keystone'] + '/v3'
        self.run(*manage, 'bootstrap', '--bootstrap-password', self.password,
                 '--bootstrap-admin-url', url, '--bootstrap-public-url', url,
                 '--bootstrap-internal-url', url,
                 '--bootstrap-region-id', 'RegionOne')
        proc = self.wsgi('keystone', 'keystone.wsgi.api:application',
                         self.port['keystone'], threads=4,
                         OS_KEYSTONE_CONFIG_FILES=path)
        self.wait_for('Keystone', lambda: self.http_ok(url), proc=proc)
        self.token = self.admin_token()
        # A service project and user for every service, a demo project
        # with a member (non-admin) user, and the catalog.
        domain = {'domain_id': 'default'}
        _, project = self.ks('POST', '/v3/projects', {'project': dict(
            domain, name='service')})
        service_project = project['project']['id']
        _, project = self.ks('POST', '/v3/projects', {'project': dict(
            domain, name='demo')})
        demo_project = project['project']['id']
        admin_role = self.ks_id('roles', 'admin')
        member_role = self.ks_id('roles', 'member')
        # keystone-manage bootstrap makes the service role too.
        service_role = self.ks_id('roles', 'service')
        for name, project_id, roles in (
                ('service-user', service_project, [admin_role,
                                                   service_role]),
                ('demo', demo_project, [member_role])):
            _, user = self.ks('POST', '/v3/users', {'user': dict(
                domain, name=name, password=self.password,
                default_project_id=project_id)})
            for role_id in roles:
                self.ks('PUT', '/v3/projects/%s/users/%s/roles/%s' % (
                    project_id, user['user']['id'], role_id))
        for kind, name, url in (
                ('compute', 'nova', 'http://127.0.0.1:%d/v2.1'
                 % self.port['nova']),
                ('placement', 'placement', 'http://127.0.0.1:%d'
                 % self.port['placement']),
                ('image', 'glance', 'http://127.0.0.1:%d'
                 % self.port['glance']),
                ('network', 'neutron', 'http://127.0.0.1:%d'
                 % self.port['neutron'])):
            _, service = self.ks('POST', '/v3/services', {'service': {
                'type': kind, 'name': name}})
            for interface in ('public', 'internal', 'admin'):
                self.ks('POST', '/v3/endpoints', {'endpoint': {
                    'service_id': service['service']['id'],
                    'interface': interface, 'url': url,
                    'region_id': 'RegionOne'}})

    def start_placement(self):
        confdir = os.path.join(self.work, 'placement')
        os.makedirs(confdir)
        with open(os.path.join(confdir, 'placement.conf'), 'w') as f:
            f.write(conf.placement(self.c))
        port = self.port['placement']
        return self.wsgi('placement', 'placement.wsgi.api:application',
                         port, OS_PLACEMENT_CONFIG_DIR=confdir), port

    def start_glance(self):
        confdir = os.path.join(self.work, 'glance')
        os.makedirs(confdir)
        for name in ('glance-api-paste.ini',):
            shutil.copy(os.path.join(self.venv, 'etc', 'glance', name),
                        confdir)
        path = os.path.join(confdir, 'glance-api.conf')
        with open(path, 'w') as f:
            f.write(conf.glance(self.c))
        self.run(self.bin('glance-manage'), '--config-file', path, 'db_sync')
        port = self.port['glance']
        return self.wsgi('glance', 'glance.wsgi.api:application', port,
                         OS_GLANCE_CONFIG_DIR=confdir), port

    def start_neutron(self):
        path = self.write('neutron.conf', conf.neutron(self.c))
        self.run(self.bin('neutron-db-manage'), '--config-file', path,
                 'upgrade', 'heads')
        port = self.port['neutron']
        return self.wsgi('neutron', 'mini_cloud_neutron_wsgi:application',
                         port, OS_NEUTRON_CONFIG_FILES=path), port

    def setup_nova(self):
        self.nova_conf = self.write('nova.conf', conf.nova(self.c))
        # The same library as the FPGA host's: nova-api validates flavors'
        # bitstream names against it.
        self.write_bitstreams(os.path.join(self.work, 'nova', 'bitstreams'))
        # Nova's WSGI application reads its paste file from the first of
        # its configuration files.
        shutil.copy(os.path.join(self.venv, 'etc', 'nova', 'api-paste.ini'),
                    self.work)
        manage = [self.bin('nova-manage'), '--config-file', self.nova_conf]
        self.run(*manage, 'api_db', 'sync')
        self.run(*manage, 'cell_v2', 'map_cell0', '--database_connection',
                 self.mysql('nova_cell0'))
        self.run(*manage, 'cell_v2', 'create_cell', '--name', 'cell1',
                 '--verbose')
        self.run(*manage, 'db', 'sync')

    def start_nova(self):
        procs = [
            self.wsgi('nova-api', 'nova.wsgi.osapi_compute:application',
                      self.port['nova'], threads=4,
                      OS_NOVA_CONFIG_DIR=self.work,
                      OS_NOVA_CONFIG_FILES='api-paste.ini;nova.conf'),
            self.start('nova-conductor', [self.bin('nova-conductor'),
                                          '--config-file', self.nova_conf]),
            self.start('nova-scheduler', [self.bin('nova-scheduler'),
                                          '--config-file', self.nova_conf]),
        ]
        # Loading the API under uWSGI (config, the service record, the
        # paste pipeline) has taken over 120 s on a loaded 2-core CI host.
        self.wait_for('Nova API', lambda: self.http_ok(
            'http://127.0.0.1:%d/' % self.port['nova']), timeout=300,
            proc=procs[0])
        return procs

    def mark_fake_tree(self, profile, tree):
        """Mark ``tree`` as the fake driver's own build of ``profile``.

        The fake driver rebuilds a tree that lacks its checksum of the
        profile; with it, the driver uses the compute's tree as it is.
        """
        from cyborg_drivers.fake import driver as fake
        from cyborg_drivers.fake import hosttree
        with open(hosttree.profile_path(profile), 'rb') as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        with open(os.path.join(tree, fake._STAMP), 'w') as f:
            f.write(digest)

    def write_bitstreams(self, directory):
        """The FPGA host's bitstream library: one GBS and its manifest."""
        from cyborg_drivers import bitstreams
        os.makedirs(directory, exist_ok=True)
        name = FPGA_IMAGE + '.gbs'
        with open(os.path.join(directory, name), 'wb') as f:
            f.write(bitstreams.make_gbs(FPGA_INTERFACE_ID, FPGA_IMAGE_AFU_ID,
                                        b'mini-cloud', name=FPGA_IMAGE))
        with open(os.path.join(directory, 'manifest.json'), 'w') as f:
            json.dump({'bitstreams': {FPGA_IMAGE: {'file': name}}}, f)

    def start_computes(self):
        self.computes = []
        for host, profile in COMPUTES:
            state = os.path.join(self.work, host)
            tree = os.path.join(state, 'sys')
            os.makedirs(state)
            if profile == 'fpga-host':
                # The compute's and its agent's [cyborg_nova]
                # bitstream_dir (both read its nova.conf).
                self.write_bitstreams(os.path.join(state, 'bitstreams'))
            self.run(self.bin('python'), '-m', 'cyborg_drivers.fake.hosttree',
                     profile, tree)
            path = self.write(host + '.conf', conf.nova(
                self.c, host=host, profile_root=tree, state_dir=state))
            proc = self.start('nova-compute-' + host, [
                self.bin('nova-compute'), '--config-file', path])
            agent_port = free_port()
            fake = {}
            if profile == 'fpga-host':
                # Its agent programs the fake FPGAs of the tree.
                self.mark_fake_tree(profile, tree)
                fake = {'fake_profile': profile, 'fake_tree': tree}
            agent = self.write('agent-%s.conf' % host,
                               conf.agent(self.c, host, agent_port, **fake))
            self.computes.append((host, profile, path, agent, proc))

    def start_cyborg(self):
        path = self.write('conductor-lite.conf', conf.conductor(self.c))
        proc = self.start('cyborg-nova-conductor', [
            self.bin('cyborg-nova-conductor'), '--config-file', path])
        self.wait_for('conductor-lite', lambda: self.port_open(
            self.port['conductor']), proc=proc)
        for host, _, nova_conf, agent_conf, _ in self.computes:
            self.start('cyborg-nova-agent-' + host, [
                self.bin('cyborg-nova-agent'), '--config-file', nova_conf,
                '--config-file', agent_conf])

    def wait_for_computes(self):
        manage = [self.bin('nova-manage'), '--config-file', self.nova_conf]
        hosts = {host for host, *_ in self.computes}

        def registered():
            out = subprocess.run(
                [self.bin('openstack'), 'compute', 'service', 'list',
                 '--service', 'nova-compute', '-f', 'value', '-c', 'Host',
                 '-c', 'State'], env=self.cli_env(), capture_output=True,
                text=True)
            up = {line.split()[0] for line in out.stdout.splitlines()
                  if line.endswith(' up')}
            return hosts <= up

        self.wait_for('nova-compute services', registered, timeout=240)
        self.run(*manage, 'cell_v2', 'discover_hosts', '--verbose')

    def upload_image(self):
        path = os.path.join(self.work, 'tiny.img')
        with open(path, 'wb') as f:
            f.write(b'\0' * 1024 * 1024)
        out = self.cli('image', 'create', '--disk-format', 'raw',
                       '--container-format', 'bare', '--public', '--file',
                       path, '-f', 'value', '-c', 'id', 'tiny')
        self.c['image_id'] = out.strip()
        out = self.cli('flavor', 'create', '--ram', '512', '--disk', '1',
                       '--vcpus', '1', '-f', 'value', '-c', 'id', 'm1.tiny')
        self.c['flavor_id'] = out.strip()

    # -- the openstack CLI -------------------------------------------------

    def cli_env(self, user='admin', project='admin'):
        return self.env(**self.os_vars(user, project))

    def os_vars(self, user='admin', project='admin'):
        return {
            'OS_AUTH_URL': self.c['keystone'] + '/v3',
            'OS_IDENTITY_API_VERSION': '3',
            'OS_USERNAME': user,
            'OS_PASSWORD': self.password,
            'OS_PROJECT_NAME': project,
            'OS_USER_DOMAIN_NAME': 'Default',
            'OS_PROJECT_DOMAIN_NAME': 'Default',
            'OS_REGION_NAME': 'RegionOne',
            'OS_PLACEMENT_API_VERSION': '1.39',
        }

    def cli(self, *argv, user='admin', project='admin', show=False,
            refused=False, compute_api=None):
        """``openstack argv``'s output; with ``refused``, its error.

        ``compute_api`` sets the compute microversion (Nova validates
        flavor extra specs from 2.86).
        """
        cmd = ['openstack'] + list(argv)
        if show:
            print('\n$ %s' % ' '.join(cmd), flush=True)
        env = self.cli_env(user, project)
        if compute_api:
            env['OS_COMPUTE_API_VERSION'] = compute_api
        result = subprocess.run(
            [self.bin('openstack')] + list(argv),
            env=env, capture_output=True, text=True)
        if show:
            print(result.stdout if not refused else result.stderr, end='',
                  flush=True)
        if refused:
            if not result.returncode:
                raise Failure('openstack %s was accepted; it should have '
                              'been refused' % ' '.join(argv))
            return result.stderr
        if result.returncode:
            raise Failure('openstack %s failed: %s'
                          % (' '.join(argv), result.stderr.strip()))
        return result.stdout

    # -- run ---------------------------------------------------------------

    def up(self):
        if os.path.exists(self.work):
            stop_pids(self.work)
            shutil.rmtree(self.work)
        os.makedirs(self.logs)
        log('work directory %s' % self.work)
        steps = time.time()
        self.start_mariadb()
        self.start_rabbitmq()
        log('MariaDB and RabbitMQ up (%.0fs)' % (time.time() - steps))
        self.start_keystone()
        log('Keystone up at %s (%.0fs)' % (self.c['keystone'],
                                           time.time() - steps))
        waiting = [self.start_placement(), self.start_glance(),
                   self.start_neutron()]
        self.setup_nova()
        for proc, port in waiting:
            self.wait_for('service on port %d' % port,
                          lambda: self.http_ok('http://127.0.0.1:%d/' % port),
                          proc=proc)
        log('Placement, Glance, Neutron up; Nova databases ready (%.0fs)'
            % (time.time() - steps))
        self.start_nova()
        self.start_computes()
        self.start_cyborg()
        self.wait_for_computes()
        log('Nova and %d computes up, agents and conductor-lite started '
            '(%.0fs)' % (len(self.computes), time.time() - steps))
        self.upload_image()

    def operator_commands(self):
        """The operator's commands, as typed, checked."""
        self.cli('flavor', 'create', '--ram', '512', '--disk', '1',
                 '--vcpus', '1', '--property', 'resources:FPGA=1',
                 '--property', 'trait:CUSTOM_FPGA_INTEL=required',
                 'fpga.operator', show=True)
        self.check_bitstream_specs()
        out = self.cli('server', 'create', '--flavor', 'fpga.operator',
                       '--image', 'tiny', '--nic', 'none', '--wait',
                       'operator-fpga', user='demo', project='demo',
                       show=True)
        # The admin sees where it runs (the server is the demo project's:
        # by id).
        server_id = [line.split('|')[2].strip() for line in out.splitlines()
                     if line.startswith('| id ')][0]
        server = self.cli('server', 'show', server_id, '-f', 'json',
                          show=True)
        server = json.loads(server)
        status = server['status']
        host = server.get('OS-EXT-SRV-ATTR:host')
        out = self.cli('resource', 'provider', 'list', show=True)
        ok = (status == 'ACTIVE' and host == COMPUTES[0][0]
              and '%s_accelerator_0000:5e:00.0' % COMPUTES[0][0] in out)
        if ok:
            # While the server holds its FPGA: kill -9 of its compute.
            try:
                print('CRASH: %s (ok)' % crash.kill_compute(self, server_id),
                      flush=True)
            except crash.CrashFailure as e:
                raise Failure('nova-compute killed: %s' % e)
            server = json.loads(self.cli('server', 'show', server_id, '-f',
                                         'json'))
            if server['status'] != 'ACTIVE':
                raise Failure('after the kills the server is %s'
                              % server['status'])
        self.cli('server', 'delete', '--wait', 'operator-fpga', user='demo',
                 project='demo', show=True)
        self.cli('flavor', 'delete', 'fpga.operator')
        print('OPERATOR: server %s on %s (%s)' % (
            status, host, 'ok' if ok else 'FAILED'), flush=True)
        if not ok:
            raise Failure('operator commands: server %s on %s' % (status,
                                                                  host))

    def check_bitstream_specs(self):
        """Nova's API validates the cyborg_nova: extra specs.

        A library entry is taken, an unknown name and a misspelled key
        are refused with a message that says why (on the flavor of
        :meth:`operator_commands`; the accepted one is removed again).
        """
        self.cli('flavor', 'set', '--property',
                 'cyborg_nova:bitstream=%s' % FPGA_IMAGE, 'fpga.operator',
                 show=True, compute_api='2.86')
        self.cli('flavor', 'unset', '--property', 'cyborg_nova:bitstream',
                 'fpga.operator', compute_api='2.86')
        checks = [
            ('cyborg_nova:bitstream=no-such-afu',
             "'no-such-afu' is not a bitstream of the library"),
            ('cyborg_nova:bitsream=%s' % FPGA_IMAGE,
             'cyborg_nova:bitsream'),
        ]
        for prop, expected in checks:
            err = self.cli('flavor', 'set', '--property', prop,
                           'fpga.operator', show=True, refused=True,
                           compute_api='2.86')
            if expected not in err:
                raise Failure('openstack flavor set --property %s: refused '
                              'without saying %r: %s'
                              % (prop, expected, err.strip()))
        print('OPERATOR: bitstream extra specs validated (ok)', flush=True)

    def tempest(self):
        for name, props in FLAVORS:
            argv = ['flavor', 'create', '--ram', '512', '--disk', '1',
                    '--vcpus', '1']
            for prop in props:
                argv += ['--property', prop]
            self.cli(*argv + [name])
        workspace = os.path.join(self.work, 'tempest')
        # A workspace registry of its own: ~/.tempest is left alone.
        self.run(self.bin('tempest'), 'init', '--workspace-path',
                 os.path.join(self.work, 'tempest-workspaces.yaml'),
                 workspace)
        with open(os.path.join(workspace, 'etc', 'tempest.conf'), 'w') as f:
            f.write(conf.tempest(self.c, EXPECTED_RCS, EXPECTED_TRAITS))
        cmd = [self.bin('tempest'), 'run', '--regex', 'cyborg_nova',
               '--concurrency', '1']
        log('$ ' + ' '.join(['tempest'] + cmd[1:]))
        result = subprocess.run(cmd, cwd=workspace, env=self.env())
        return result.returncode

    def notifications(self):
        """The agents' lifecycle notifications waiting on the broker."""
        found = subprocess.run(
            [self.bin('python'), '-c', NOTIFICATIONS, self.c['transport_url']],
            capture_output=True, text=True, timeout=120, env=self.env())
        print('NOTIFICATIONS: %s' % (
            found.stdout.strip() if found.returncode == 0 else
            'cannot read them: %s' % found.stderr[-2000:]), flush=True)

    def stop(self):
        for name, proc in reversed(self.procs):
            stop_group(proc.pid, proc)
        if getattr(self, 'rabbit_env', None):
            # epmd is started by Erlang as a daemon of its own, on our
            # private port: stop exactly that one.
            subprocess.run(['epmd', '-kill'], env=self.rabbit_env,
                           stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        pidfile = os.path.join(self.work, PIDFILE)
        if os.path.exists(pidfile):
            os.unlink(pidfile)
        self.procs = []

    def print_env(self):
        print('\n# The mini-cloud is up. To use it:')
        for key, value in sorted(self.os_vars().items()):
            print('export %s=%s' % (key, value))
        print('# as the non-admin member: OS_USERNAME=demo '
              'OS_PROJECT_NAME=demo')
        print('# stop it: %s --stop --work-dir %s'
              % (os.path.join(TOP, 'tools', 'mini-cloud.sh'), self.work))
        with open(os.path.join(self.work, 'openrc'), 'w') as f:
            for key, value in sorted(self.os_vars().items()):
                f.write('export %s=%s\n' % (key, value))
        print('# (also in %s/openrc)' % self.work, flush=True)


def alive(pid):
    """Whether ``pid`` runs (a zombie nobody reaps does not)."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except (OSError, IndexError):
        return False


def stop_group(pid, proc=None, timeout=15):
    """Stop the process group ``pid`` leads: SIGTERM, then SIGKILL.

    The leader gets ``timeout`` seconds to exit; whatever is left of its
    group (workers, helpers) is killed after that.
    """
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None:
            if proc.poll() is not None:
                break
        elif not alive(pid):
            break
        time.sleep(0.2)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if proc is not None:
        proc.wait()


def stop_pids(work):
    """Stop the services a ``--keep`` run left, from its PID file."""
    pidfile = os.path.join(work, PIDFILE)
    if not os.path.exists(pidfile):
        return False
    with open(pidfile) as f:
        entries = [line.split(None, 1) for line in f if line.strip()]
    for pid, name in reversed(entries):
        stop_group(int(pid))
    os.unlink(pidfile)
    epmd = os.path.join(work, 'epmd-port')
    if os.path.exists(epmd):
        with open(epmd) as f:
            subprocess.run(['epmd', '-kill'], env=dict(
                os.environ, ERL_EPMD_PORT=f.read().strip()),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--venv', required=True)
    parser.add_argument('--work-dir', default=os.path.join(TOP,
                                                           '.mini-cloud'))
    parser.add_argument('--keep', action='store_true',
                        help='leave the cloud up and print its CLI '
                             'environment')
    parser.add_argument('--no-tempest', action='store_true',
                        help='skip the tempest plugin tests')
    parser.add_argument('--stop', action='store_true',
                        help='stop a cloud a --keep run left up')
    parser.add_argument('--nova-in-l1', action='store_true',
                        help='instead of the operator commands and the '
                             'tempest tests: a nova-compute with the '
                             'libvirt driver in a VM with an SR-IOV NIC '
                             '(tools/nested), and a server booted onto '
                             'one of its VFs (see mini_cloud_l1.py)')
    args = parser.parse_args()
    if args.stop:
        found = stop_pids(os.path.abspath(args.work_dir))
        log('stopped' if found else 'nothing to stop')
        return 0

    cloud = Cloud(args)

    def on_signal(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    status = 1
    keep = False
    try:
        cloud.up()
        with open(os.path.join(cloud.work, 'epmd-port'), 'w') as f:
            f.write(str(cloud.port['epmd']))
        log('cloud up in %.0fs' % (time.time() - cloud.started))
        if args.nova_in_l1:
            status = mini_cloud_l1.run(cloud)
            return status
        cloud.operator_commands()
        status = 0
        if not args.no_tempest:
            status = cloud.tempest()
            log('tempest exit status %d' % status)
            cloud.notifications()
        keep = args.keep
    except Failure as e:
        log('FAILED: %s' % e)
    except Exception as e:
        log('FAILED: %r' % e)
        raise
    finally:
        if keep:
            cloud.print_env()
        else:
            log('stopping everything it started')
            cloud.stop()
        log('done in %.0fs' % (time.time() - cloud.started))
    return status


if __name__ == '__main__':
    sys.exit(main())
