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

"""The Placement client: every request cyborg-nova itself makes.

The fencer's ``reserved`` writes, attach's allocation changes,
programming's reads and trait writes, the conductor's usage reads and
the commands' reads all go through :class:`Client`, over a keystoneauth
adapter. It alone builds Placement URLs, sends one microversion, and
turns every failure into a :class:`PlacementError` carrying the HTTP
status and Placement's error code; :func:`retry` redoes a
read-modify-write that met a generation conflict. (Inside nova-compute,
:mod:`cyborg_nova.virt` uses Nova's own report client instead.)

Credentials come from the usual places: the ``[placement]`` section of a
config file (as nova.conf has it on a compute), or the openstack CLI's
``OS_*`` environment / ``--os-*`` options.
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
from typing import Any, Callable, Iterable, TypeVar
import urllib.parse

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import loading as ks_loading
from oslo_config import cfg
import tenacity

GROUP = 'placement'
#: Sent with every request. What needs what: ``in_tree`` 1.14, error
#: codes 1.23, ``reserved`` equal to ``total`` 1.26, the consumer
#: generation 1.28, the consumer type (which a PUT of allocations must
#: carry from 1.38 on) 1.38. The oldest Placement supported (13.0.1,
#: with Nova 31) serves up to 1.39.
MICROVERSION = '1.39'
#: Placement's error code for a generation conflict.
CONCURRENT_UPDATE = 'placement.concurrent_update'
#: How much of an answer's body an error message quotes.
QUOTED = 300

_PROVIDERS = '/resource_providers'
_ALLOCATIONS = '/allocations'
_TRAITS = '/traits'

T = TypeVar('T')


class PlacementError(Exception):
    """Placement could not be reached or refused a request.

    :ivar status: the HTTP status Placement answered; None when there
        is none to tell: Placement could not be reached (the message
        starts ``cannot reach Placement``), or the error is not an
        answer's (unusable credentials, no provider of a name).
    :ivar code: Placement's error code (``errors[0].code``, e.g.
        ``placement.concurrent_update``); None when it gave none.
    :ivar detail: Placement's explanation, on one line.
    :ivar text: the body as answered.
    :ivar method: the request's method, e.g. ``PUT``.
    :ivar url: the request's URL, relative to Placement's endpoint.
    """

    def __init__(self, message: str, status: int | None = None,
                 code: str | None = None, detail: str = '',
                 text: str = '', method: str | None = None,
                 url: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.detail = detail
        self.text = text
        self.method = method
        self.url = url

    @classmethod
    def answered(cls, method: str, url: str, resp) -> PlacementError:
        """The error for Placement's answer ``resp`` to ``method url``."""
        return cls('Placement answered %s to %s %s: %s' % (
            resp.status_code, method, url, resp.text[:QUOTED]),
            status=resp.status_code, code=_code(resp),
            detail=_detail(resp), text=resp.text, method=method, url=url)

    @property
    def conflict(self) -> bool:
        """A generation conflict: someone wrote in between."""
        return self.status == 409 and self.code == CONCURRENT_UPDATE

    @property
    def not_found(self) -> bool:
        """What the request names does not exist (404)."""
        return self.status == 404

    @property
    def server_error(self) -> bool:
        """Placement failed (5xx)."""
        return self.status is not None and self.status >= 500

    @property
    def no_such_trait(self) -> bool:
        """A trait a write names is not defined (deleted meanwhile)."""
        # Placement gives this 400 no code of its own.
        return self.status == 400 and 'No such trait' in self.text


def _errors(resp) -> list[dict]:
    """The ``errors`` of an answer's JSON body; [] when it has none."""
    try:
        errors = resp.json()['errors']
    except (ValueError, KeyError, TypeError):
        return []
    if not isinstance(errors, list):
        return []
    return [e for e in errors if isinstance(e, dict)]


def _code(resp) -> str | None:
    errors = _errors(resp)
    return errors[0].get('code') if errors else None


def _detail(resp) -> str:
    text = '; '.join(str(e.get('detail') or e.get('title', ''))
                     for e in _errors(resp)) or resp.text
    return ' '.join(text.split())[:400]


# -- conflict retries ---------------------------------------------------------

class _JitteredExponential(tenacity.wait.wait_base):
    """``backoff`` before the second attempt, doubled before each next.

    Each wait is scaled by a factor drawn from 0.5 to 1.5, so two writers
    that collided do not collide again in lockstep.
    """

    def __init__(self, backoff: float) -> None:
        self.backoff = backoff

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        return (self.backoff * 2 ** (retry_state.attempt_number - 1)
                * random.uniform(0.5, 1.5))


def is_conflict(exc: PlacementError) -> bool:
    """The default of :func:`retry`: only generation conflicts."""
    return exc.conflict


def retry(attempt: Callable[[int], T], attempts: int, backoff: float,
          retry_on: Callable[[PlacementError], bool] = is_conflict,
          after: Callable[[int, PlacementError], Any] | None = None) -> T:
    """``attempt(0)``, ``attempt(1)``... until one returns; its result.

    An attempt that raises a :class:`PlacementError` ``retry_on``
    accepts (by default, a generation conflict) is followed, while fewer
    than ``attempts`` were made, by a wait (:class:`_JitteredExponential`
    of ``backoff``) and the next attempt, which reads again what it
    modifies.

    :param attempt: one read-modify-write; gets its number, from 0.
    :param after: called with the attempt's number (from 1) and its
        error after each attempt whose error is retried, the last one too.
    :raises PlacementError: the last attempt's, when all ``attempts``
        raised one ``retry_on`` accepts.
    :raises Exception: anything else an attempt raises, at once.
    """
    numbers = itertools.count()

    def note(state: tenacity.RetryCallState) -> None:
        if after is not None:
            after(state.attempt_number, state.outcome.exception())
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(attempts),
        wait=_JitteredExponential(backoff),
        retry=tenacity.retry_if_exception(
            lambda exc: isinstance(exc, PlacementError) and retry_on(exc)),
        after=note, reraise=True)
    return retrying(lambda: attempt(next(numbers)))


# -- the client ---------------------------------------------------------------

class Client:
    """Placement's API as cyborg-nova uses it, over keystoneauth.

    :param adapter: a keystoneauth adapter for Placement (e.g. from
        :func:`from_conf`), or anything with its ``get``/``put`` methods.
    :param timeout: seconds per request when the adapter's session sets
        none; None: keystoneauth's default (no bound).
    """

    def __init__(self, adapter: ks_adapter.Adapter,
                 timeout: float | None = None) -> None:
        self.adapter = adapter
        session = getattr(adapter, 'session', None)
        self.timeout = getattr(session, 'timeout', None) or timeout

    def request(self, method: str, url: str, ok: Iterable[int] = (200,),
                **kwargs):
        """Send one request; its response, when its status is in ``ok``.

        :raises PlacementError: Placement is unreachable or answered
            another status.
        """
        if self.timeout is not None:
            kwargs['timeout'] = self.timeout
        try:
            # The per-method calls (get, put...): what wrappers of an
            # adapter that count or fault requests offer too.
            resp = getattr(self.adapter, method.lower())(
                url, raise_exc=False, microversion=MICROVERSION, **kwargs)
        except ks_exc.ClientException as exc:
            raise PlacementError('cannot reach Placement: %s' % exc,
                                 method=method, url=url) from exc
        if resp.status_code not in ok:
            raise PlacementError.answered(method, url, resp)
        return resp

    def read(self, url: str, field: str | None = None) -> Any:
        """``GET url``: the JSON body, or its ``field``.

        :raises PlacementError: as :meth:`request`; also when the body is
            not JSON or has no ``field``.
        """
        resp = self.request('GET', url)
        try:
            body = resp.json()
            return body if field is None else body[field]
        except (ValueError, KeyError, TypeError) as exc:
            raise PlacementError(
                'Placement answered GET %s with no %s: %r'
                % (url, field or 'JSON body', exc), status=resp.status_code,
                text=resp.text, method='GET', url=url) from exc

    # -- resource providers ---------------------------------------------------

    def providers(self, name: str | None = None,
                  in_tree: str | None = None) -> list[dict]:
        """``GET /resource_providers``, filtered by ``name``, ``in_tree``.

        :raises PlacementError: as :meth:`read`.
        """
        query = [(key, value) for key, value in (('name', name),
                                                 ('in_tree', in_tree))
                 if value is not None]
        url = _PROVIDERS
        if query:
            url += '?' + urllib.parse.urlencode(
                query, safe='', quote_via=urllib.parse.quote)
        return self.read(url, 'resource_providers')

    def provider_inventories(self, uuid: str) -> dict:
        """``{'resource_provider_generation': n, 'inventories': {...}}``.

        :raises PlacementError: as :meth:`read` (404: no such provider).
        """
        return self.read(_provider(uuid, 'inventories'))

    def put_provider_inventory(self, uuid: str, resource_class: str,
                               record: dict, generation: int) -> int:
        """Write one inventory record; the provider's new generation.

        :raises PlacementError: as :meth:`request` (409: the provider
            changed since ``generation``).
        """
        body = dict(record, resource_provider_generation=generation)
        return self.request(
            'PUT', _provider(uuid, 'inventories', resource_class),
            json=body).json()['resource_provider_generation']

    def provider_usages(self, uuid: str) -> dict[str, int]:
        """Resource class -> units allocated, of provider ``uuid``.

        :raises PlacementError: as :meth:`read` (404: no such provider).
        """
        return self.read(_provider(uuid, 'usages'), 'usages')

    def provider_allocations(self, uuid: str) -> dict:
        """``{'resource_provider_generation': n, 'allocations': {...}}``.

        :raises PlacementError: as :meth:`read` (404: no such provider).
        """
        return self.read(_provider(uuid, 'allocations'))

    def provider_traits(self, uuid: str) -> dict:
        """``{'resource_provider_generation': n, 'traits': [...]}``.

        :raises PlacementError: as :meth:`read` (404: no such provider).
        """
        return self.read(_provider(uuid, 'traits'))

    def put_provider_traits(self, uuid: str, traits: Iterable[str],
                            generation: int) -> int:
        """Set the provider's traits; its new generation.

        :raises PlacementError: as :meth:`request` (409: it changed since
            ``generation``; 400 :attr:`~PlacementError.no_such_trait`).
        """
        return self.request('PUT', _provider(uuid, 'traits'), json={
            'traits': sorted(traits),
            'resource_provider_generation': generation,
        }).json()['resource_provider_generation']

    def ensure_traits(self, names: Iterable[str]) -> None:
        """Define the custom traits ``names`` (a defined one stays as is).

        :raises PlacementError: as :meth:`request`.
        """
        for name in names:
            self.request('PUT', '%s/%s' % (_TRAITS, name), ok=(201, 204))

    # -- consumers ------------------------------------------------------------

    def consumer_allocations(self, consumer: str) -> dict:
        """``GET /allocations/{consumer}``: allocations, generation, owner.

        :raises PlacementError: as :meth:`read`.
        """
        return self.read('%s/%s' % (_ALLOCATIONS, consumer))

    def put_consumer_allocations(self, consumer: str, body: dict) -> None:
        """Replace the consumer's allocations with ``body``.

        :param body: ``allocations``, ``consumer_generation``,
            ``project_id``, ``user_id`` and ``consumer_type``.
        :raises PlacementError: as :meth:`request` (409
            :attr:`~PlacementError.conflict`: it changed meanwhile).
        """
        self.request('PUT', '%s/%s' % (_ALLOCATIONS, consumer), ok=(204,),
                     json=body)


def _provider(uuid: str, *rest: str) -> str:
    return '/'.join((_PROVIDERS, uuid) + rest)


# -- adapters -----------------------------------------------------------------

def register_opts(conf: cfg.ConfigOpts) -> None:
    """The keystoneauth options of ``[placement]``, as in nova.conf."""
    ks_loading.register_session_conf_options(conf, GROUP)
    ks_loading.register_auth_conf_options(conf, GROUP)
    ks_loading.register_adapter_conf_options(conf, GROUP)


def register_argparse(parser: argparse.ArgumentParser) -> None:
    """``--os-*`` options, defaulting to the ``OS_*`` environment."""
    ks_loading.register_session_argparse_arguments(parser)
    # The plugin's own options (--os-token, --os-endpoint for
    # admin_token; --os-auth-url, --os-username... for password) follow
    # --os-auth-type / OS_AUTH_TYPE.
    ks_loading.register_auth_argparse_arguments(parser, sys.argv[1:],
                                                default='password')


def from_conf(conf: cfg.ConfigOpts) -> ks_adapter.Adapter | None:
    """An adapter from ``[placement]``, or None when it has no auth."""
    if not conf[GROUP].auth_type:
        return None
    auth = ks_loading.load_auth_from_conf_options(conf, GROUP)
    session = ks_loading.load_session_from_conf_options(conf, GROUP,
                                                        auth=auth)
    return ks_loading.load_adapter_from_conf_options(
        conf, GROUP, session=session, service_type='placement',
        default_microversion=MICROVERSION)


def from_args(args: argparse.Namespace) -> ks_adapter.Adapter:
    """An adapter from ``--os-*`` options and the ``OS_*`` environment.

    :raises PlacementError: the credentials are incomplete.
    """
    try:
        auth = ks_loading.load_auth_from_argparse_arguments(args)
    except (ks_exc.MissingRequiredOptions, ks_exc.NoMatchingPlugin,
            ks_exc.AuthPluginException) as exc:
        raise PlacementError('no usable Placement credentials (%s); set '
                             'the OS_* environment as for the openstack '
                             'CLI, or [placement] in --config-file' % exc)
    session = ks_loading.load_session_from_argparse_arguments(args,
                                                              auth=auth)
    return ks_adapter.Adapter(session, service_type='placement',
                              default_microversion=MICROVERSION)


# -- the provider tree (``cyborg-nova tree``) ---------------------------------

def provider_tree(client: ks_adapter.Adapter,
                  host: str | None = None) -> list[dict]:
    """Providers with inventory, usage and traits, roots first, by tree.

    With ``host``, only the tree whose root provider is named ``host``
    (the compute node's hypervisor hostname).

    :raises PlacementError: as :meth:`Client.read`; also when ``host``
        has no provider.
    """
    api = Client(client)
    in_tree = None
    if host:
        roots = api.providers(name=host)
        if not roots:
            raise PlacementError('no resource provider named %r' % host)
        in_tree = roots[0]['uuid']
    providers = api.providers(in_tree=in_tree)
    for rp in providers:
        rp['inventories'] = api.provider_inventories(
            rp['uuid'])['inventories']
        rp['usages'] = api.provider_usages(rp['uuid'])
        rp['traits'] = sorted(api.provider_traits(rp['uuid'])['traits'])
    return _tree_order(providers)


def _tree_order(providers: list[dict]) -> list[dict]:
    children: dict[str | None, list[dict]] = {}
    for rp in providers:
        children.setdefault(rp['parent_provider_uuid'], []).append(rp)
    known = {rp['uuid'] for rp in providers}
    ordered = []

    def walk(rp, depth):
        rp['depth'] = depth
        ordered.append(rp)
        for child in sorted(children.get(rp['uuid'], []),
                            key=lambda c: c['name']):
            walk(child, depth + 1)
    for rp in sorted(providers, key=lambda r: r['name']):
        # Roots, and providers whose parent is outside what was listed.
        if rp['parent_provider_uuid'] not in known:
            walk(rp, 0)
    return ordered
