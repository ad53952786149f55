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

"""``GET /hardware`` of every agent, with each device's Placement usage.

The internal API spec has the conductor "wrangle the agents to present a
coherent answer": it asks every UP agent for its hardware at once (a
small thread pool, each call bounded by ``agent_timeout``), annotates
each entry with its host and, when the entry's ``uuid`` is a Placement
resource provider (cyborg-nova reports each accelerator as one, under
that uuid), with the provider's usages. A failure is never the whole
answer's: an agent that does not answer, answers nonsense or cannot be
matched to Placement is listed in ``errors`` and the rest is returned.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from typing import Any
import uuid as uuid_lib

import jsonschema
from keystoneauth1 import adapter as ks_adapter

from cyborg_nova.conductor import db
from cyborg_nova import placement as placement_client
from cyborg_nova import service_client

LOG = logging.getLogger(__name__)

#: Largest ``GET /hardware`` answer read from one agent.
MAX_AGENT_RESPONSE = 16 * 1024 * 1024
#: Agents asked at the same time.
POOL_SIZE = 8

#: One entry of an agent's ``GET /hardware`` (the internal API spec's
#: keys; agents add more, which are passed on). Valid both as JSON
#: Schema and as an OpenAPI 3.0 schema object.
ENTRY_SCHEMA = {
    'type': 'object',
    'required': ['uuid', 'acc_specs', 'acc_status'],
    'properties': {
        'uuid': {'type': 'string', 'minLength': 1, 'maxLength': 255},
        'acc_specs': {
            'type': 'object',
            'required': ['remote', 'num', 'device_type', 'acc_capability'],
            'properties': {
                'remote': {'type': 'integer'},
                'num': {'type': 'integer'},
                'device_type': {'type': 'string'},
                'acc_capability': {'type': 'object'},
            },
        },
        'acc_status': {
            'type': 'object',
            'required': ['setup_required', 'reboot_required'],
            'properties': {
                'setup_required': {'type': 'boolean'},
                'reboot_required': {'type': 'boolean'},
            },
        },
    },
}

_AGENT_RESPONSE_SCHEMA = {
    'type': 'object',
    'required': ['hardware'],
    'properties': {'hardware': {'type': 'array'}},
}


class AgentError(Exception):
    """An agent's hardware could not be had; the message says why."""


class Collector:
    """Gathers the hardware of agents.

    :param token: sent to agents as ``X-Auth-Token`` (None: no header).
    :param timeout: seconds for each agent's answer.
    :param ca_file: CA bundle for ``https`` agents (None: the system's).
    :param placement: a Placement adapter, or None when Placement is
        not configured.
    :param placement_problem: why ``placement`` is None, for the errors.
    :raises OSError: ``ca_file`` cannot be read.
    :raises ssl.SSLError: ``ca_file`` holds no certificate.
    """

    def __init__(self, token: str | None, timeout: float,
                 ca_file: str | None = None,
                 placement: ks_adapter.Adapter | None = None,
                 placement_problem: str = 'Placement is not configured '
                                          '([placement] auth_type is unset)'
                 ) -> None:
        self.token = token
        self.timeout = timeout
        self.ca_file = ca_file
        self.placement = placement
        self.placement_problem = placement_problem
        # An unreadable CA file stops the conductor at its start, not at
        # its first call to an agent.
        service_client.check_ca_file(ca_file)
        self._clients: dict[tuple[str, str], service_client.Client] = {}
        self._lock = threading.Lock()

    def client(self, agent: db.Agent) -> service_client.Client:
        """The client of ``agent``'s API, kept for its next calls."""
        key = (agent.host, agent.endpoint)
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                # An agent that registered again elsewhere is not called
                # at its old endpoint any more: its old client goes.
                for old in [k for k in self._clients if k[0] == agent.host]:
                    self._clients.pop(old).close()
                client = self._clients[key] = service_client.Client(
                    agent.endpoint, 'agent %s' % agent.host,
                    token=self.token, timeout=self.timeout,
                    ca_file=self.ca_file)
            return client

    # -- one agent ---------------------------------------------------------

    def fetch(self, agent: db.Agent) -> list[Any]:
        """The agent's ``GET /hardware`` list, as the agent sent it.

        :raises AgentError: no answer in time, an error status, or an
            answer that is not ``{"hardware": [...]}``.
        """
        client = self.client(agent)
        try:
            body = client.get('/hardware', max_response=MAX_AGENT_RESPONSE)
        except service_client.ServiceError as exc:
            raise AgentError(str(exc)) from exc
        try:
            jsonschema.validate(body, _AGENT_RESPONSE_SCHEMA)
        except jsonschema.ValidationError as exc:
            raise AgentError('GET %s answered no hardware list: %s'
                             % (client.url('/hardware'), exc.message))
        return body['hardware']

    def usage(self, provider: str) -> dict | None:
        """The usages of Placement provider ``provider``; None if no such.

        :raises AgentError: Placement is not configured, unreachable or
            answered an error.
        """
        if self.placement is None:
            raise AgentError(self.placement_problem)
        try:
            # The canonical form: "{...}" or "urn:uuid:..." spellings
            # would make Placement answer 400, not "no such provider".
            provider = str(uuid_lib.UUID(provider))
        except ValueError:
            # Not a uuid: cannot be a provider, and is not put in a URL.
            return None
        # A hung Placement is bounded by the agents' timeout when
        # [placement] timeout is unset.
        client = placement_client.Client(self.placement,
                                         timeout=self.timeout)
        try:
            return client.provider_usages(provider)
        except placement_client.PlacementError as exc:
            if exc.not_found:
                return None
            raise AgentError(str(exc)) from exc

    def _host(self, agent: db.Agent, placement_down: list
              ) -> tuple[list[dict], list[str]]:
        """One agent's annotated entries, and its problems."""
        entries, problems = [], []
        try:
            listed = self.fetch(agent)
        except AgentError as exc:
            return [], [str(exc)]
        unknown_usage, usage_problem = 0, None
        for index, entry in enumerate(listed):
            try:
                jsonschema.validate(entry, ENTRY_SCHEMA)
            except jsonschema.ValidationError as exc:
                where = '/'.join(str(p) for p in exc.absolute_path)
                problems.append('hardware entry %d is invalid%s: %s' % (
                    index, ' at %s' % where if where else '', exc.message))
                continue
            entry = dict(entry, host=agent.host, usage=None)
            if not placement_down:
                try:
                    entry['usage'] = self.usage(entry['uuid'])
                except AgentError as exc:
                    # One failure is enough: the other lookups of this
                    # request would only wait for the same timeout.
                    placement_down.append(str(exc))
            if placement_down:
                unknown_usage += 1
                usage_problem = placement_down[0]
            entries.append(entry)
        if unknown_usage:
            problems.append('usage of %d device(s) unknown: %s'
                            % (unknown_usage, usage_problem))
        return entries, problems

    # -- every agent -------------------------------------------------------

    def collect(self, agents: list[db.Agent]) -> dict:
        """``{"hardware": [...], "errors": [{"host", "message"}]}``."""
        hardware: list[dict] = []
        errors: list[dict] = []
        if not agents:
            return {'hardware': hardware, 'errors': errors}
        # Shared by the workers: once Placement failed, stop asking it.
        placement_down: list[str] = []
        pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=min(POOL_SIZE, len(agents)),
            thread_name_prefix='agent-hardware')
        try:
            futures = {pool.submit(self._host, agent, placement_down):
                       agent for agent in agents}
            # A backstop: each call bounds itself by the timeout, plus
            # one read of up to the socket timeout; plus the usages.
            concurrent.futures.wait(futures, timeout=3 * self.timeout + 1)
            for future, agent in sorted(futures.items(),
                                        key=lambda i: i[1].host):
                if not future.done():
                    problems = ['no answer within %g s' % self.timeout]
                    entries = []
                else:
                    try:
                        entries, problems = future.result()
                    except Exception as exc:
                        LOG.exception('Collecting the hardware of %s '
                                      'failed', agent.host)
                        entries, problems = [], ['internal error: %s'
                                                 % exc]
                hardware.extend(entries)
                errors.extend({'host': agent.host, 'message': message}
                              for message in problems)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        for error in errors:
            LOG.warning('Hardware of %s: %s', error['host'],
                        error['message'])
        return {'hardware': hardware, 'errors': errors}
