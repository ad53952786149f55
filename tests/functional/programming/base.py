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

"""A compute host to reprogram, for the functional programming tests.

The host is a fake sysfs tree reported to a real Placement by
tools/report_host.py (Nova's report client and cyborg-nova's provider
code), a state store shared with it, a bitstream directory and a
``nova.conf`` for the CLI and the agent. Loads go through the real
drivers and a real ``sysfs_admin`` privsep daemon (``privsep-helper``,
configured with the tree and the bitstream directory), which runs the
stand-in ``fpgaconf`` / ``xbmgmt`` of tests/unit/programming/tools.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import time
import uuid

import requests

from cyborg_drivers import discovery
from cyborg_drivers.fake import hosttree
from cyborg_drivers import loader
from cyborg_nova import providers
from tests.functional.agent import base as agent_base
from tests.unit.programming import fakes

REPO = agent_base.REPO_ROOT
HELPER = os.path.join(os.path.dirname(sys.executable), 'privsep-helper')
DRIVERS = 'intel_fpga,xilinx_fpga'
FAILED_TRAIT = 'CUSTOM_FPGA_PROGRAMMING_FAILED'


def function_trait(afu: str, vendor: str = 'INTEL') -> str:
    return 'CUSTOM_FPGA_FUNCTION_ID_%s_%s' % (vendor,
                                              fakes.hexid(afu).upper())


class Host:
    """One fake compute host in ``directory`` reported to ``placement``."""

    def __init__(self, directory: str, placement: str,
                 profile='fpga-host', program_timeout: int = 60,
                 privsep_threads: int | None = None) -> None:
        self.directory = directory
        # Hosts of one Placement must not share a compute node.
        self.nodename = 'cn-%s' % uuid.uuid4().hex[:8]
        self.placement_url = placement
        self.root = os.path.join(directory, 'sys')
        hosttree.build_tree(profile, self.root)
        self.state_path = os.path.join(directory, 'state.sqlite')
        self.bitstreams = fakes.library(os.path.join(directory,
                                                     'bitstreams'))
        self.tools = fakes.install_tools(os.path.join(directory, 'bin'))
        self.tool_log = os.path.join(directory, 'tools.log')
        privsep_conf = os.path.join(directory, 'privsep.conf')
        daemon = {
            'cyborg_nova_privsep': {'sysfs_root': self.root,
                                    'bitstream_dir': self.bitstreams,
                                    'fpga_program_timeout': 30},
        }
        if privsep_threads:
            # Loads run in the daemon's thread pool (default: one thread
            # per CPU): as many as are programmed at once.
            daemon['cyborg_nova_privsep_sysfs'] = {
                'thread_pool_size': privsep_threads}
        agent_base.write_config(privsep_conf, daemon)
        self.helper_command = (
            'env PYTHONPATH=%s PATH=%s:/usr/bin:/bin FAKE_FPGA_SYSFS=%s '
            'FAKE_FPGA_LOG=%s %s --config-file %s' % (
                REPO, self.tools, self.root, self.tool_log, HELPER,
                privsep_conf))
        self.sections = {
            'cyborg_nova': {'sysfs_root': self.root,
                            'state_path': self.state_path,
                            'enabled_drivers': DRIVERS,
                            'auto_ready': 'True',
                            'bitstream_dir': self.bitstreams,
                            'program_timeout': program_timeout},
            'placement': {'auth_type': 'admin_token',
                          'endpoint': placement, 'token': 'admin'},
            'cyborg_nova_privsep_sysfs': {
                'helper_command': self.helper_command},
        }
        self.conf = agent_base.write_config(
            os.path.join(directory, 'nova.conf'), self.sections)
        self.http = requests.Session()
        self.http.headers.update({'X-Auth-Token': 'admin',
                                  'OpenStack-API-Version': 'placement 1.39'})

    # -- Nova's side ---------------------------------------------------------

    def report(self) -> None:
        """One resource tracker update (Nova's report client)."""
        proc = subprocess.run(
            [sys.executable, '-W', 'ignore',
             os.path.join(REPO, 'tools', 'report_host.py'),
             '--placement', self.placement_url, '--nodename', self.nodename,
             '--sysfs-root', self.root, '--state-path', self.state_path,
             '--drivers', DRIVERS],
            env=agent_base.env(), capture_output=True, text=True,
            timeout=120)
        assert proc.returncode == 0, proc.stderr

    # -- Placement -----------------------------------------------------------

    def uuid(self, address: str) -> str:
        return providers.provider_uuid(self.nodename, address)

    def get(self, path: str) -> dict:
        resp = self.http.get(self.placement_url + path, timeout=30)
        resp.raise_for_status()
        return resp.json()

    def inventory(self, address: str) -> dict:
        return self.get('/resource_providers/%s/inventories'
                        % self.uuid(address))['inventories']['FPGA']

    def reserved(self, address: str) -> int:
        return self.inventory(address)['reserved']

    def traits(self, address: str) -> set:
        return set(self.get('/resource_providers/%s/traits'
                            % self.uuid(address))['traits'])

    def generation(self, address: str) -> int:
        return self.get('/resource_providers/%s' % self.uuid(address))[
            'generation']

    def allocate(self, address: str, consumer: str | None = None) -> str:
        consumer = consumer or str(uuid.uuid4())
        resp = self.http.put(
            self.placement_url + '/allocations/%s' % consumer, timeout=30,
            json={'allocations': {self.uuid(address): {
                'resources': {'FPGA': 1}}},
                'project_id': uuid.uuid4().hex, 'user_id': uuid.uuid4().hex,
                'consumer_generation': None, 'consumer_type': 'INSTANCE'})
        assert resp.status_code == 204, resp.text
        return consumer

    def deallocate(self, consumer: str) -> None:
        resp = self.http.delete(self.placement_url + '/allocations/%s'
                                % consumer, timeout=30)
        assert resp.status_code in (204, 404), resp.text

    # -- the host ------------------------------------------------------------

    def loaded(self, address: str) -> str | None:
        """The function id sysfs shows, as the drivers read it."""
        from oslo_config import cfg
        conf = cfg.ConfigOpts()
        conf([])
        drivers = loader.load(conf, DRIVERS.split(','))
        acc = discovery.Discoverer(drivers, self.root).discover(
        ).by_address()[address]
        return acc.fpga_regions[0].function_id

    def discovered_traits(self, address: str) -> set:
        from oslo_config import cfg
        conf = cfg.ConfigOpts()
        conf([])
        drivers = loader.load(conf, DRIVERS.split(','))
        acc = discovery.Discoverer(drivers, self.root).discover(
        ).by_address()[address]
        return set(acc.traits) | {providers.OWNER_TRAIT}

    def device_row(self, address: str) -> tuple:
        with sqlite3.connect(self.state_path) as db:
            return db.execute(
                'SELECT state, reason, owned_traits FROM devices WHERE '
                'nodename = ? AND address = ?',
                (self.nodename, address)).fetchone()

    def jobs(self) -> list[dict]:
        """Every job in the journal, oldest first, with its steps."""
        with sqlite3.connect(self.state_path) as db:
            db.row_factory = sqlite3.Row
            try:
                rows = db.execute('SELECT * FROM program_jobs ORDER BY '
                                  'created_at').fetchall()
            except sqlite3.OperationalError:
                return []
            jobs = []
            for row in rows:
                job = dict(row)
                job['steps'] = [tuple(s) for s in db.execute(
                    'SELECT step, at, detail FROM program_steps WHERE '
                    'job = ? ORDER BY rowid', (job['id'],))]
                jobs.append(job)
        return jobs

    def wait_for_step(self, step: str, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for job in self.jobs():
                if any(s[0] == step for s in job['steps']):
                    return job
            time.sleep(0.02)
        raise AssertionError('no job reached step %s: %s'
                             % (step, self.jobs()))

    def wait_finished(self, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            jobs = self.jobs()
            if jobs and all(j['status'] != 'running' for j in jobs):
                return jobs[-1]
            time.sleep(0.05)
        raise AssertionError('jobs did not finish: %s' % self.jobs())

    # -- commands ------------------------------------------------------------

    def cli(self, *args, env: dict | None = None, timeout: float = 120
            ) -> tuple[int, str, str]:
        """``cyborg-nova --config-file nova.conf ARGS``, as operators run it.

        The program commands are included even where not installed.
        """
        proc = subprocess.run(
            [sys.executable, '-m', 'cyborg_nova.cmd.program',
             '--config-file', self.conf] + list(args),
            capture_output=True, text=True, timeout=timeout,
            env=dict(agent_base.env(), **(env or {})), cwd=REPO)
        return proc.returncode, proc.stdout, proc.stderr

    def program(self, *devices, bitstream='intel/nlb3.gbs', extra=(),
                env=None):
        args = ['program', '--nodename', self.nodename, '--bitstream',
                bitstream, '-f', 'json']
        for device in devices:
            args += ['--device', device]
        rc, out, err = self.cli(*(args + list(extra)), env=env)
        rows = json.loads(out) if out.strip().startswith('[') else None
        return rc, rows, err

    def agent(self, name: str = 'agent', extra: dict | None = None,
              command: list | None = None, environ: dict | None = None
              ) -> agent_base.AgentProcess:
        """An agent process on this host (not started).

        ``command`` and ``environ`` as :class:`agent_base.AgentProcess`
        takes them.
        """
        sections = {
            'cyborg_agent': {'discovery_interval': '0',
                             'nodename': self.nodename},
            **{k: dict(v) for k, v in self.sections.items()},
        }
        for section, options in (extra or {}).items():
            sections.setdefault(section, {}).update(options)
        return agent_base.AgentProcess(self.directory, sections, name=name,
                                       command=command, environ=environ)


def check_consistent(host: Host, address: str) -> str:
    """The end state of a device after programming, whatever happened:

    - unfenced: its traits match what sysfs shows loaded, it is ready;
    - fenced: failed (the trait on its provider) or not ready.

    Returns "programmed", "unchanged" (unfenced, the old function) or
    "failed".
    """
    reserved = host.reserved(address)
    state, reason, owned = host.device_row(address)
    traits = host.traits(address)
    loaded = host.loaded(address)
    loaded_trait = 'CUSTOM_FPGA_FUNCTION_ID_INTEL_%s' % loaded.upper()
    functions = {t for t in traits
                 if t.startswith('CUSTOM_FPGA_FUNCTION_ID_')}
    if reserved == 0:
        assert state == 'ready', (state, reason)
        assert functions == {loaded_trait}, (functions, loaded)
        assert FAILED_TRAIT not in traits
        assert set(json.loads(owned)) == host.discovered_traits(address)
        return ('programmed' if loaded == fakes.hexid(fakes.NLB3)
                else 'unchanged')
    assert state == 'failed', (state, reason, reserved)
    assert FAILED_TRAIT in traits
    return 'failed'


@contextlib.contextmanager
def hooked_programmer(host: Host, wrap):
    """The Programmer ``cyborg-nova program`` builds for ``host``.

    Its Placement client (the fencer's and the trait writer's too) is
    ``wrap(client)``, for tests that intercept requests. The privsep
    daemon it may have started is stopped afterwards.
    """
    from cyborg_nova.cmd import cli
    from cyborg_nova.cmd import program as program_cmd

    app = cli.CyborgNovaApp()
    app.conf = cli.load_config([host.conf])
    programmer = program_cmd.make_programmer(app, argparse.Namespace())
    client = wrap(programmer.client)
    programmer.client = client
    programmer.fencer.client = client
    programmer.placement.client = client
    try:
        yield programmer
    finally:
        programmer.close()
        import privsep
        privsep.sysfs_admin.stop()
