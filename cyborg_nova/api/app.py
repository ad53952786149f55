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

"""The WSGI application: routing, authentication, policy, validation.

Every response is JSON. Errors have the body ``{"error": {"code": N,
"title": ..., "message": ...}}`` and a 4xx status for anything the
client did wrong; a 5xx only for a bug, which is logged.
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import logging
import re
from typing import Any, Callable

import jsonschema
from oslo_config import cfg
from oslo_policy import policy
import webob
import webob.exc

LOG = logging.getLogger(__name__)

JSON = 'application/json'

#: ``handler(request, **path_params) -> (status, body)``.
Handler = Callable[..., 'tuple[int, Any]']


class HTTPError(Exception):
    """A client error with its status code and a message for the user."""

    def __init__(self, code: int, message: str,
                 headers: dict | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.headers = headers or {}


@dataclasses.dataclass
class Route:
    """One operation of the API."""

    method: str
    path: str
    handler: Handler
    rule: str
    summary: str
    body: dict | None = None
    response: dict | None = None
    status: int = 200
    operation_id: str = ''
    #: Error codes of this route beyond those every route may answer.
    errors: tuple[int, ...] = ()
    #: Served without a token or policy check (``rule`` unused): the
    #: driver half of the internal API, which the agent calls without
    #: one, on a service that listens on loopback only.
    public: bool = False

    def __post_init__(self) -> None:
        pattern = re.sub(r'\{(\w+)\}', r'(?P<\1>[^/]+)', self.path)
        self.regex = re.compile('^%s$' % pattern)
        self.params = re.findall(r'\{(\w+)\}', self.path)
        if not self.operation_id:
            self.operation_id = '%s_%s' % (
                self.method.lower(),
                re.sub(r'\W+', '_', self.path).strip('_') or 'root')


ERROR_SCHEMA = {
    'type': 'object',
    'required': ['error'],
    'properties': {'error': {
        'type': 'object',
        'required': ['code', 'title', 'message'],
        'properties': {'code': {'type': 'integer'},
                       'title': {'type': 'string'},
                       'message': {'type': 'string'}},
    }},
}


def error_body(code: int, message: str) -> dict:
    title = webob.exc.status_map[code].title
    return {'error': {'code': code, 'title': title, 'message': message}}


class Application:
    """A JSON API made of :class:`Route` objects.

    :param conf: the service's config; options of :mod:`cyborg_nova.conf.
        api` under ``group``.
    :param rules: the policy defaults (``oslo_policy`` rule defaults)
        every route's ``rule`` is one of.
    """

    def __init__(self, title: str, version: str, routes: list[Route],
                 conf: cfg.ConfigOpts, group: str,
                 rules: list[policy.RuleDefault]) -> None:
        self.title = title
        self.version = version
        self.routes = routes
        self.opts = conf[group]
        self.enforcer = policy.Enforcer(conf)
        self.enforcer.register_defaults(rules)
        known = {r.name for r in rules}
        for route in routes:
            if not route.public and route.rule not in known:
                raise ValueError('route %s %s names unknown policy rule %s'
                                 % (route.method, route.path, route.rule))

    # -- WSGI --------------------------------------------------------------

    def __call__(self, environ, start_response):
        request = webob.Request(environ)
        headers: dict = {}
        try:
            status, body = self._dispatch(request)
        except HTTPError as exc:
            status, body = exc.code, error_body(exc.code, exc.message)
            headers = exc.headers
        except Exception:
            LOG.exception('%s %s failed', request.method, request.path)
            status, body = 500, error_body(
                500, 'internal error; the service log has the details')
        response = webob.Response(status=status, content_type=JSON,
                                  charset='utf-8')
        if status == 401:
            response.headers['WWW-Authenticate'] = 'X-Auth-Token'
        response.headers.update(headers)
        if body is not None and status != 204:
            response.text = json.dumps(body)
        return response(environ, start_response)

    def _dispatch(self, request: webob.Request) -> tuple[int, Any]:
        match = None
        allowed = []
        for route in self.routes:
            found = route.regex.match(request.path_info)
            if not found:
                continue
            allowed.append(route.method)
            if route.method == request.method:
                match = (route, found.groupdict())
                break
        if match is None:
            if allowed:
                methods = ', '.join(sorted(allowed))
                raise HTTPError(405, 'method %s not allowed on %s; allowed: '
                                '%s' % (request.method, request.path_info,
                                        methods), {'Allow': methods})
            raise HTTPError(404, 'no such resource: %s' % request.path_info)
        route, params = match
        if not route.public:
            self._authorize(route, self._authenticate(request))
        kwargs = dict(params)
        if route.body is not None:
            kwargs['body'] = self._body(request, route.body)
        elif request.content_length:
            raise HTTPError(400, '%s %s takes no request body'
                            % (route.method, route.path))
        status, body = route.handler(request, **kwargs)
        return status, body

    # -- the pieces --------------------------------------------------------

    def _authenticate(self, request: webob.Request) -> list[str]:
        """The caller's roles; raises 401 without a valid token."""
        if self.opts.auth_strategy == 'keystone':
            # keystonemiddleware (in front of this app) has validated the
            # token and says so in these headers.
            if request.headers.get('X-Identity-Status') != 'Confirmed':
                raise HTTPError(401, 'authentication required: a valid '
                                'Keystone token in X-Auth-Token')
            return [r.strip().lower() for r in
                    request.headers.get('X-Roles', '').split(',')
                    if r.strip()]
        token = request.headers.get('X-Auth-Token', '')
        roles = []
        for role, configured in (('admin', self.opts.admin_token),
                                 ('reader', self.opts.reader_token)):
            if configured and token and hmac.compare_digest(
                    token.encode(), configured.encode()):
                roles.append(role)
        if not roles:
            raise HTTPError(401, 'authentication required: a valid token '
                            'in X-Auth-Token')
        return roles

    def _authorize(self, route: Route, roles: list[str]) -> None:
        creds = {'roles': roles}
        if not self.enforcer.enforce(route.rule, {}, creds):
            raise HTTPError(403, 'policy does not allow %s %s (rule %s)'
                            % (route.method, route.path, route.rule))

    def _body(self, request: webob.Request, schema: dict) -> Any:
        length = request.content_length
        if length is None or length == 0:
            raise HTTPError(400, 'a JSON request body is required')
        if length > self.opts.max_body_size:
            raise HTTPError(413, 'request body of %d bytes is larger than '
                            'the %d allowed' % (length,
                                                self.opts.max_body_size))
        if request.content_type != JSON:
            raise HTTPError(415, 'the request body must be %s, not %r'
                            % (JSON, request.content_type or 'unset'))
        raw = request.body_file.read(self.opts.max_body_size + 1)
        if len(raw) > self.opts.max_body_size:
            raise HTTPError(413, 'request body is larger than the %d bytes '
                            'allowed' % self.opts.max_body_size)
        try:
            body = json.loads(raw.decode('utf-8'))
        except (UnicodeDecodeError, ValueError) as exc:
            raise HTTPError(400, 'the request body is not valid JSON: %s'
                            % exc)
        errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(
            body), key=lambda e: list(e.absolute_path))
        if errors:
            error = jsonschema.exceptions.best_match(errors)
            where = '/'.join(str(p) for p in error.absolute_path)
            raise HTTPError(400, 'invalid request body%s: %s' % (
                ' at %s' % where if where else '', error.message))
        return body

    # -- the document ------------------------------------------------------

    def openapi(self) -> dict:
        """The OpenAPI 3.0 document of this API."""
        paths: dict[str, dict] = {}
        errors = {
            code: {'description': webob.exc.status_map[code].title,
                   'content': {JSON: {'schema': ERROR_SCHEMA}}}
            for code in (400, 401, 403, 404, 405, 413, 415)}
        for route in self.routes:
            op: dict[str, Any] = {
                'operationId': route.operation_id,
                'summary': route.summary,
                'security': [] if route.public else [{'token': []}],
                **({} if route.public else {'x-policy-rule': route.rule}),
                'responses': {
                    str(route.status): {
                        'description': route.summary,
                        **({'content': {JSON: {'schema': route.response}}}
                           if route.response else {}),
                    },
                    **{str(c): e for c, e in errors.items()},
                    **{str(c): {
                        'description': webob.exc.status_map[c].title,
                        'content': {JSON: {'schema': ERROR_SCHEMA}}}
                       for c in route.errors},
                },
            }
            if route.params:
                op['parameters'] = [
                    {'name': p, 'in': 'path', 'required': True,
                     'schema': {'type': 'string'}} for p in route.params]
            if route.body is not None:
                op['requestBody'] = {
                    'required': True,
                    'content': {JSON: {'schema': route.body}}}
            paths.setdefault(route.path, {})[route.method.lower()] = op
        return {
            'openapi': '3.0.3',
            'info': {'title': self.title, 'version': self.version},
            'paths': paths,
            'components': {'securitySchemes': {'token': {
                'type': 'apiKey', 'in': 'header', 'name': 'X-Auth-Token'}}},
        }


def openapi_route(app_ref: Callable[[], Application], rule: str) -> Route:
    """``GET /openapi.json``: the document, behind the same auth."""
    return Route('GET', '/openapi.json',
                 lambda request: (200, app_ref().openapi()), rule,
                 'The OpenAPI document of this API',
                 response={'type': 'object'})
