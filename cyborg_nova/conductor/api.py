"""The conductor-lite's REST API: routes, their schemas and handlers.

``POST /hello`` is the internal API spec's "register agent" (and the
heartbeat), ``GET /agents`` who is UP, ``GET /hardware`` every UP
host's hardware with Placement usage, ``GET /openapi.json`` this API.
Every route requires a token; the policy rules are
:data:`cyborg_nova.policies.CONDUCTOR_RULES`.
"""

from __future__ import annotations

import functools
import logging
import re
from typing import Any
import urllib.parse

from oslo_config import cfg
from oslo_db import exception as db_exc
import webob

from cyborg_nova.api import app as api_app
from cyborg_nova.conductor import db
from cyborg_nova.conductor import hardware
from cyborg_nova.conductor import registry as registry_mod
from cyborg_nova import policies
from cyborg_nova import version

LOG = logging.getLogger(__name__)

GROUP = 'cyborg_conductor'

# jsonschema's "pattern" is a search, and "$" matches before a final
# newline: the handlers check these again with fullmatch.
HOST_PATTERN = r'^[A-Za-z0-9]([A-Za-z0-9._-]{0,253}[A-Za-z0-9])?$'
STATUS_PATTERN = r'^[A-Z][A-Z0-9_-]{0,31}$'
# Scheme, a host (name, IPv4 or [IPv6]) with an optional port, an
# optional path; no credentials, query or fragment: "/hardware" and the
# like are appended to it.
# The path is RFC 3986 characters (unreserved, sub-delims, ':@%/').
ENDPOINT_PATTERN = (r"^https?://[A-Za-z0-9._:\[\]-]+"
                    r"(/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*)?$")

HELLO_BODY = {
    'type': 'object',
    'additionalProperties': False,
    'required': ['status', 'endpoint', 'host'],
    'properties': {
        'status': {
            'type': 'string', 'pattern': STATUS_PATTERN,
            'description': 'What the agent says of itself: READY, '
                           'DRAINING, IN-PROGRESS...'},
        'endpoint': {
            'type': 'string', 'maxLength': db.ENDPOINT_LENGTH,
            'pattern': ENDPOINT_PATTERN,
            'description': 'The http(s) URL of the agent\'s REST API.'},
        'host': {
            'type': 'string', 'minLength': 1,
            'maxLength': db.HOST_LENGTH, 'pattern': HOST_PATTERN,
            'description': 'The agent\'s host: the Nova nodename.'},
    },
}

AGENT = {
    'type': 'object',
    'additionalProperties': False,
    'required': ['host', 'endpoint', 'status', 'state', 'first_seen',
                 'last_seen'],
    'properties': {
        'host': {'type': 'string'},
        'endpoint': {'type': 'string'},
        'status': {'type': 'string'},
        'state': {'type': 'string',
                  'enum': [registry_mod.UP, registry_mod.DOWN]},
        'first_seen': {'type': 'string', 'format': 'date-time'},
        'last_seen': {'type': 'string', 'format': 'date-time'},
    },
}

AGENTS = {
    'type': 'object',
    'additionalProperties': False,
    'required': ['agents'],
    'properties': {'agents': {'type': 'array', 'items': AGENT}},
}

HARDWARE_ENTRY = {
    **hardware.ENTRY_SCHEMA,
    'required': hardware.ENTRY_SCHEMA['required'] + ['host', 'usage'],
    'properties': {
        **hardware.ENTRY_SCHEMA['properties'],
        'host': {'type': 'string'},
        # OpenAPI 3.0's spelling of "or null": the document is 3.0.
        'usage': {'type': 'object', 'nullable': True,
                  'additionalProperties': {'type': 'integer'},
                  'description': 'The provider\'s usages in Placement by '
                                 'resource class; null when the uuid is '
                                 'no provider or Placement could not '
                                 'tell (see errors).'},
    },
}

HARDWARE = {
    'type': 'object',
    'additionalProperties': False,
    'required': ['hardware', 'errors'],
    'properties': {
        'hardware': {'type': 'array', 'items': HARDWARE_ENTRY},
        'errors': {'type': 'array', 'items': {
            'type': 'object',
            'additionalProperties': False,
            'required': ['host', 'message'],
            'properties': {'host': {'type': 'string'},
                           'message': {'type': 'string'}},
        }},
    },
}


def endpoint_problem(endpoint: str) -> str | None:
    """Why ``endpoint`` is not an agent API URL; None when it is one."""
    if not re.fullmatch(ENDPOINT_PATTERN, endpoint):
        return 'not an http(s) URL'
    try:
        parts = urllib.parse.urlsplit(endpoint)
        port = parts.port
    except ValueError as exc:
        return str(exc)
    if parts.scheme not in ('http', 'https'):
        return 'the scheme must be http or https'
    if not parts.hostname:
        return 'it has no host'
    if port == 0:
        return 'port 0 is no port'
    if parts.username is not None or parts.query or parts.fragment:
        return 'credentials, a query or a fragment are not allowed'
    return None


# Database failures that are the database's state, not a bug here: the
# client may retry. Others (bad SQL, data too long) stay 500s.
_UNAVAILABLE = (db_exc.DBConnectionError, db_exc.DBNonExistentDatabase,
                db_exc.DBDeadlock)


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
        if not re.fullmatch(HOST_PATTERN, body['host']):
            raise api_app.HTTPError(400, 'host %r is not a host name'
                                    % body['host'])
        if not re.fullmatch(STATUS_PATTERN, body['status']):
            raise api_app.HTTPError(400, 'status %r is not an upper-case '
                                    'word' % body['status'])
        problem = endpoint_problem(body['endpoint'])
        if problem:
            raise api_app.HTTPError(400, 'endpoint %r is not the http(s) '
                                    'URL of an agent API: %s'
                                    % (body['endpoint'], problem))
        return 200, self.registry.hello(body['host'], body['endpoint'],
                                        body['status'])

    @_unavailable_db
    def agents(self, request: webob.Request) -> tuple[int, Any]:
        return 200, {'agents': self.registry.agents()}

    @_unavailable_db
    def hardware(self, request: webob.Request) -> tuple[int, Any]:
        return 200, self.collector.collect(self.registry.up_agents())


def make_app(conf: cfg.ConfigOpts, registry: registry_mod.Registry,
             collector: hardware.Collector) -> api_app.Application:
    """The WSGI application of the conductor-lite."""
    handlers = Handlers(registry, collector)
    application = None
    routes = [
        api_app.Route(
            'POST', '/hello', handlers.hello,
            'cyborg_nova:conductor:hello',
            'Register an agent, or record its heartbeat',
            body=HELLO_BODY, response=AGENT),
        api_app.Route(
            'GET', '/agents', handlers.agents,
            'cyborg_nova:conductor:agents',
            'List the agents and whether they are UP or DOWN',
            response=AGENTS),
        api_app.Route(
            'GET', '/hardware', handlers.hardware,
            'cyborg_nova:conductor:hardware',
            'List the hardware of every UP agent, with Placement usage',
            response=HARDWARE),
        api_app.openapi_route(lambda: application,
                              'cyborg_nova:conductor:openapi'),
    ]
    application = api_app.Application(
        'cyborg-nova conductor-lite', version.version_string(), routes,
        conf, GROUP, policies.CONDUCTOR_RULES)
    return application
