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

"""The conductor-lite's REST API: routes and their handlers.

``POST /hello`` is the internal API spec's "register agent" (and the
heartbeat), ``GET /agents`` who is UP, ``GET /hardware`` every UP
host's hardware with Placement usage, ``GET /drivers`` every agent's
drivers and ``POST /services`` has every UP agent discover its devices'
services (both asked of the agents at once), ``POST /programs`` reprograms an
FPGA through its host's agent and ``GET /programs/{id}`` follows the job,
``GET /openapi.json`` this API.
Every route requires a token; the policy rules are
:data:`cyborg_nova.policies.CONDUCTOR_RULES`.
"""

from __future__ import annotations

import concurrent.futures
import functools
import json
import logging
import re
import threading
from typing import Any
import uuid as uuid_lib

from oslo_config import cfg
from oslo_db import exception as db_exc
from sqlalchemy import exc as sa_exc
import webob

from cyborg_nova.api import app as api_app
from cyborg_nova.api import endpoints
from cyborg_nova.conductor import db
from cyborg_nova.conductor import hardware
from cyborg_nova.conductor import registry as registry_mod
from cyborg_nova.conductor import schemas
from cyborg_nova import policies
from cyborg_nova import service_client
from cyborg_nova import version

LOG = logging.getLogger(__name__)

GROUP = 'cyborg_conductor'


def endpoint_problem(endpoint: str) -> str | None:
    """Why ``endpoint`` is not an agent API URL; None when it is one."""
    try:
        endpoints.normalize(endpoint)
    except endpoints.InvalidEndpoint as exc:
        return exc.reason
    return None


# Database failures that are the database's state, not a bug here: the
# client may retry. Others (bad SQL, data too long) stay 500s. A server
# gone under a pooled connection can surface untranslated: on PostgreSQL
# oslo.db's ping invalidates the pool and the reconnection's refusal is
# SQLAlchemy's OperationalError (seen restarting the server under two
# conductors).
_UNAVAILABLE = (db_exc.DBConnectionError, db_exc.DBNonExistentDatabase,
                db_exc.DBDeadlock, sa_exc.OperationalError,
                sa_exc.DisconnectionError)


def _unavailable_db(handler):
    """A database that cannot be reached is a 503, not a bug (500)."""
    @functools.wraps(handler)
    def wrapper(*args, **kwargs):
        try:
            return handler(*args, **kwargs)
        except _UNAVAILABLE as exc:
            LOG.error('The database is unavailable: %s', exc)
            raise api_app.HTTPError(503, 'the database is unavailable; '
                                         'retry later')
    return wrapper


class Handlers:
    """The operations, on an agent registry and a hardware collector."""

    def __init__(self, registry: registry_mod.Registry,
                 collector: hardware.Collector) -> None:
        self.registry = registry
        self.collector = collector

    @_unavailable_db
    def hello(self, request: webob.Request, body: dict) -> tuple[int, Any]:
        if not re.fullmatch(schemas.STATUS_PATTERN, body['status']):
            raise api_app.HTTPError(400, 'status %r is not an upper-case '
                                    'word' % body['status'])
        try:
            endpoint = endpoints.normalize(body['endpoint'])
        except endpoints.InvalidEndpoint as exc:
            raise api_app.HTTPError(400, 'endpoint %r is not the http(s) '
                                    'URL of an agent API: %s'
                                    % (body['endpoint'], exc.reason))
        host = body.get('host')
        if host is None:
            # The spec's body has no host: the endpoint's names it.
            host = endpoints.host_of(endpoint)
            if not re.fullmatch(schemas.HOST_PATTERN, host):
                raise api_app.HTTPError(
                    400, 'host is missing and the endpoint\'s host %r is '
                    'not a host name to take instead; send host' % host)
        elif not re.fullmatch(schemas.HOST_PATTERN, host):
            raise api_app.HTTPError(400, 'host %r is not a host name'
                                    % host)
        return 200, self.registry.hello(host, endpoint, body['status'])

    @_unavailable_db
    def agents(self, request: webob.Request) -> tuple[int, Any]:
        return 200, {'agents': self.registry.agents()}

    @_unavailable_db
    def hardware(self, request: webob.Request) -> tuple[int, Any]:
        return 200, self.collector.collect(self.registry.up_agents())


def call_agent(collector: hardware.Collector, agent: db.Agent,
               method: str, path: str, body: dict | None = None
               ) -> tuple[int, dict]:
    """``method path`` on ``agent``: (status, JSON answer).

    An error status is answered, not raised: its answer is ``{"error":
    {"message"}}``.

    :raises hardware.AgentError: no answer within the collector's
        timeout, or not JSON.
    """
    try:
        return collector.client(agent).request(method, path, body)
    except service_client.ServiceError as exc:
        if exc.status is None:
            raise hardware.AgentError(str(exc)) from exc
        return exc.status, {'error': {'message': exc.detail}}


class FanOut:
    """One call on every agent at once, each bounded by ``agent_timeout``.

    An agent that is DOWN is not called; it and one that does not
    answer, or answers an error, get an ``error`` and no result.
    """

    def __init__(self, registry: registry_mod.Registry,
                 collector: hardware.Collector) -> None:
        self.registry = registry
        self.collector = collector

    def _one(self, agent: db.Agent, now, method: str, path: str,
             key: str) -> dict:
        row = {'host': agent.host, key: None, 'error': None}
        if agent.is_down(now, self.registry.down_time):
            row['error'] = 'DOWN: no heartbeat since %s' % (
                registry_mod.isoformat(agent.last_seen))
            return row
        try:
            code, answer = call_agent(self.collector, agent, method, path)
        except hardware.AgentError as exc:
            row['error'] = str(exc)
            return row
        if code != 200:
            row['error'] = '%s %s answered %s: %s' % (
                method, path, code,
                answer.get('error', {}).get('message', ''))
        else:
            row[key] = answer
        return row

    def call(self, method: str, path: str, key: str) -> list[dict]:
        """``{"host", key: answer or None, "error"}`` of every agent."""
        now = self.registry.clock()
        agents = self.registry.store.list()
        with concurrent.futures.ThreadPoolExecutor(
                max(1, min(hardware.POOL_SIZE, len(agents)))) as pool:
            return list(pool.map(
                lambda agent: self._one(agent, now, method, path, key),
                agents))

    @_unavailable_db
    def drivers(self, request: webob.Request) -> tuple[int, Any]:
        rows = self.call('GET', '/drivers', 'drivers')
        for row in rows:
            answer = row.pop('drivers')
            row['drivers'] = answer['drivers'] if answer else None
            row['local'] = answer['local'] if answer else None
        return 200, {'agents': rows}

    @_unavailable_db
    def services(self, request: webob.Request) -> tuple[int, Any]:
        rows = self.call('POST', '/services', 'devices')
        for row in rows:
            if row['devices'] is not None:
                row['devices'] = row['devices']['devices']
        return 200, {'agents': rows}


class Programs:
    """FPGA programming jobs, relayed to the agent of their host.

    The agent validates, journals and runs the job under the id given
    here, and a job id posted again returns the same job: a row still
    ``pending`` (the agent could not be reached, or the conductor died
    before it learned the answer) is simply posted again, when it is
    read and when the conductor starts.
    """

    def __init__(self, store: db.ProgramStore,
                 registry: registry_mod.Registry,
                 collector: hardware.Collector) -> None:
        self.store = store
        self.registry = registry
        self.collector = collector

    def _call(self, agent: db.Agent, method: str, path: str,
              body: dict | None = None) -> tuple[int, dict]:
        return call_agent(self.collector, agent, method, path, body)

    def _record(self, program: db.Program) -> dict:
        return {
            'id': program.id, 'host': program.host,
            'device': program.device, 'bitstream': program.bitstream,
            'region': program.region, 'status': program.status,
            'error': program.error,
            'created_at': registry_mod.isoformat(program.created_at),
            'updated_at': registry_mod.isoformat(program.updated_at),
            'job': json.loads(program.job) if program.job else None,
        }

    def _learn(self, program: db.Program, code: int, answer: dict
               ) -> db.Program:
        """Record what the agent answered about ``program``."""
        now = db.utcnow()
        if code in (200, 202):
            job = answer['program']
            return self.store.update(
                program.id, now, status=job['status'], error=job['error'],
                job=json.dumps(job))
        message = answer.get('error', {}).get('message', '')
        if code in (400, 404, 409):
            return self.store.update(program.id, now, status='refused',
                                     error=message)
        return self.store.update(program.id, now, error='the agent '
                                 'answered %s: %s' % (code, message))

    def _submit(self, program: db.Program) -> tuple[db.Program, int]:
        """Post ``program`` to its agent; the row and the agent's code."""
        agent = self.registry.store.get(program.host)
        if agent is None:
            return self.store.update(program.id, db.utcnow(),
                                     status='refused', error='no agent '
                                     'registered for host %s'
                                     % program.host), 404
        body = {'device': program.device, 'bitstream': program.bitstream,
                'job_id': program.id}
        if program.region:
            body['region'] = program.region
        try:
            code, answer = self._call(agent, 'POST', '/program', body)
        except hardware.AgentError as exc:
            return self.store.update(program.id, db.utcnow(), error=(
                'not accepted yet (retried): %s' % exc)), 0
        return self._learn(program, code, answer), code

    def create(self, request: webob.Request, body: dict
               ) -> tuple[int, Any]:
        for key in ('host', 'device', 'bitstream'):
            schema = schemas.PROGRAMS_BODY['properties'][key]
            if not re.fullmatch(schema['pattern'], body[key]):
                raise api_app.HTTPError(400, '%s %r is not valid'
                                        % (key, body[key]))
        agent = self.registry.store.get(body['host'])
        if agent is None:
            raise api_app.HTTPError(404, 'no agent registered for host %s'
                                    % body['host'])
        if agent.is_down(db.utcnow(), self.registry.down_time):
            raise api_app.HTTPError(409, 'the agent of %s is DOWN'
                                    % body['host'])
        program = self.store.create(
            str(uuid_lib.uuid4()), body['host'], body['device'],
            body['bitstream'], body.get('region'), db.utcnow())
        program, code = self._submit(program)
        if code in (400, 404, 409):
            raise api_app.HTTPError(code, 'refused by the agent of %s: %s'
                                    % (program.host, program.error))
        if code not in (0, 202):
            raise api_app.HTTPError(502, program.error)
        return 202, {'program': self._record(program)}

    def show(self, request: webob.Request, id: str) -> tuple[int, Any]:
        program = self.store.get(id) if re.fullmatch(
            schemas.UUID_PATTERN, id) else None
        if program is None:
            raise api_app.HTTPError(404, 'no programming job %s' % id)
        if program.status == 'pending':
            program, _ = self._submit(program)
        elif program.status == 'running':
            agent = self.registry.store.get(program.host)
            try:
                code, answer = self._call(agent, 'GET',
                                          '/program/%s' % program.id)
                if code == 200:
                    program = self._learn(program, code, answer)
            except (hardware.AgentError, AttributeError) as exc:
                LOG.warning('Programming job %s: cannot ask the agent of '
                            '%s: %s', program.id, program.host, exc)
        return 200, {'program': self._record(program)}

    def pending(self) -> bool:
        """Whether a job waits to be posted (False if none can be read)."""
        try:
            return bool(self.store.pending())
        except Exception as exc:
            LOG.error('Cannot read the programming jobs: %s', exc)
            return False

    def resume(self) -> None:
        """Post again what no agent has accepted yet."""
        try:
            for program in self.store.pending():
                program, code = self._submit(program)
                LOG.info('Programming job %s of %s posted again: %s',
                         program.id, program.host, program.status)
        except Exception:
            LOG.exception('Resuming pending programming jobs failed')


def make_app(conf: cfg.ConfigOpts, registry: registry_mod.Registry,
             collector: hardware.Collector,
             resume: bool = True) -> api_app.Application:
    """The WSGI application of the conductor-lite.

    With ``resume``, programming jobs left pending by an earlier run are
    posted to their agents again, in the background.
    """
    handlers = Handlers(registry, collector)
    fanout = FanOut(registry, collector)
    programs = Programs(db.ProgramStore(registry.store.engine), registry,
                        collector)
    if resume and programs.pending():
        threading.Thread(target=programs.resume, daemon=True,
                         name='resume-programs').start()
    application = None
    routes = [
        api_app.Route(
            'POST', '/hello', handlers.hello,
            'cyborg_nova:conductor:hello',
            'Register an agent, or record its heartbeat',
            body=schemas.HELLO_BODY, response=schemas.AGENT),
        api_app.Route(
            'GET', '/agents', handlers.agents,
            'cyborg_nova:conductor:agents',
            'List the agents and whether they are UP or DOWN',
            response=schemas.AGENTS),
        api_app.Route(
            'GET', '/drivers', fanout.drivers,
            'cyborg_nova:conductor:drivers',
            'List the drivers of every agent (asked at once; DOWN or '
            'unreachable agents have an error)',
            response=schemas.AGENT_DRIVERS),
        api_app.Route(
            'POST', '/services', fanout.services,
            'cyborg_nova:conductor:services',
            'Discover the services of every UP agent\'s devices (for '
            'service-list on each host)',
            response=schemas.AGENT_SERVICES),
        api_app.Route(
            'GET', '/hardware', handlers.hardware,
            'cyborg_nova:conductor:hardware',
            'List the hardware of every UP agent, with Placement usage',
            response=schemas.HARDWARE),
        api_app.Route(
            'POST', '/programs', _unavailable_db(programs.create),
            'cyborg_nova:conductor:programs:create',
            'Reprogram an FPGA through the agent of its host',
            body=schemas.PROGRAMS_BODY, response=schemas.PROGRAM_RESPONSE,
            status=202,
            # Refused (incompatible, busy, agent DOWN); the agent failed.
            errors=(409, 502)),
        api_app.Route(
            'GET', '/programs/{id}', _unavailable_db(programs.show),
            'cyborg_nova:conductor:programs:show',
            'Show an FPGA programming job',
            response=schemas.PROGRAM_RESPONSE),
        api_app.openapi_route(lambda: application,
                              'cyborg_nova:conductor:openapi'),
    ]
    application = api_app.Application(
        'cyborg-nova conductor-lite', version.release_string(), routes,
        conf, GROUP, policies.CONDUCTOR_RULES)
    return application
