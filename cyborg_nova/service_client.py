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

"""Calls between the project's services: one client, one error.

The agent calls the conductor-lite (its heartbeat) and its out-of-process
drivers, a driver calls the agent (its hello), the conductor-lite calls
the agents, and the ``cyborg-nova`` commands call the conductor-lite.
Each of these calls goes through a :class:`Client`, which:

- sends the token as ``X-Auth-Token`` (no header without one), and JSON;
- bounds the whole answer by one timeout, a body trickled byte by byte
  included, and its size;
- never follows a redirect: it would carry the token to wherever it
  points, and none of these APIs redirects;
- trusts the system's certificate authorities, or only ``ca_file``;
- raises one error, :class:`ServiceError`, for every failure: no
  answer, an error status, an answer that is not JSON.

Placement is not one of these services: its client is
:mod:`cyborg_nova.placement`, on keystoneauth.
"""

from __future__ import annotations

import json
import ssl
import time
from typing import Any

import requests
from requests import adapters
import urllib3

#: The header the services read their token from.
TOKEN_HEADER = 'X-Auth-Token'
#: Seconds for an answer, when the caller does not say.
TIMEOUT = 10.0
#: Largest answer read, when the caller does not say.
MAX_RESPONSE = 16 * 1024 * 1024
#: Largest error answer read for its message.
_MAX_ERROR = 4096

_HINT_UNREACHABLE = 'check that it runs and that its URL is right'
_HINT_TLS = ('check its certificate and the CA file this service '
             'trusts')
_HINT_TIMEOUT = 'it may be overloaded or hung: see its log'
_HINT_AUTH = 'check the token this service sends it'
_HINT_REDIRECT = ('a redirect is not followed (it would carry the token '
                  'elsewhere): give its API\'s own URL')
_HINT_SERVER = 'see its log'
_HINT_NOT_API = 'check that the URL is its API'


class ServiceError(Exception):
    """A call to another of the project's services failed.

    :ivar peer: who was called, as the message names it (``agent cn1``).
    :ivar method: the HTTP method.
    :ivar url: the URL called.
    :ivar status: the error status it answered (3xx, 4xx or 5xx); None
        when there was no usable answer (unreachable, no answer in time,
        not JSON, too large).
    :ivar detail: its own error message (``error.message`` of a JSON
        error answer, else the start of the answer) or, without a
        status, why there was no usable answer.
    :ivar hint: what to do about it; may be empty.

    The message is ``<peer>: <METHOD> <url> <outcome>; <hint>``, or
    ``<peer> unreachable: ...`` when the call never ``reached`` it.
    """

    def __init__(self, peer: str, method: str, url: str, outcome: str,
                 hint: str = '', status: int | None = None,
                 detail: str = '', reached: bool = True) -> None:
        self.peer = peer
        self.method = method
        self.url = url
        self.status = status
        self.detail = detail
        self.hint = hint
        head = '%s: ' % peer if reached else '%s unreachable: ' % peer
        super().__init__('%s%s %s %s%s' % (
            head, method, url, outcome, '; %s' % hint if hint else ''))


class _Adapter(adapters.HTTPAdapter):
    """Connections verified against one SSL context.

    The context is the system's trust store, or only the CA file: as
    ``ssl.create_default_context`` makes it, so an unreadable CA file
    fails when the client is made, not at its first call.
    """

    def __init__(self, context: ssl.SSLContext) -> None:
        self._context = context
        super().__init__(max_retries=0)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs['ssl_context'] = self._context
        super().init_poolmanager(*args, **kwargs)


def check_ca_file(ca_file: str | None) -> ssl.SSLContext:
    """The SSL context that trusts ``ca_file`` (None: the system's CAs).

    :raises OSError: ``ca_file`` cannot be read.
    :raises ssl.SSLError: ``ca_file`` holds no certificate.
    """
    return ssl.create_default_context(cafile=ca_file)


class Client:
    """JSON calls to one of the project's services.

    :param base_url: its API URL; paths are appended to it.
    :param peer: who it is, as error messages name it
        (``conductor-lite``, ``agent cn1``).
    :param token: sent as ``X-Auth-Token``; None or empty sends none.
    :param timeout: seconds to connect, for each read, and for the whole
        answer.
    :param ca_file: the only CA to trust for ``https`` (None: the
        system's).
    :param trust_env: use proxies and a CA bundle from the environment
        (an operator's command); the services call their peers directly.
    :raises OSError: ``ca_file`` cannot be read.
    :raises ssl.SSLError: ``ca_file`` holds no certificate.
    """

    def __init__(self, base_url: str, peer: str, token: str | None = None,
                 timeout: float = TIMEOUT, ca_file: str | None = None,
                 trust_env: bool = False) -> None:
        self.base_url = base_url.rstrip('/')
        self.peer = peer
        self.timeout = timeout
        self.session = requests.Session()
        self.session.trust_env = trust_env
        self.session.headers['Accept'] = 'application/json'
        if token:
            self.session.headers[TOKEN_HEADER] = token
        # requests hands ca_certs to the pool as well: the CA file, or
        # (verify=True) its own bundle alongside the system's.
        self.session.verify = ca_file or True
        adapter = _Adapter(check_ca_file(ca_file))
        self.session.mount('https://', adapter)
        self.session.mount('http://', adapter)

    def url(self, path: str) -> str:
        """The URL of ``path`` on this service."""
        return self.base_url + path

    def request(self, method: str, path: str, body: Any = None,
                max_response: int = MAX_RESPONSE) -> tuple[int, Any]:
        """``method path`` with ``body`` as JSON: (status, JSON answer).

        :returns: a 2xx status and its answer (None when it is empty).
        :raises ServiceError: no answer within the timeout, an error
            status (a redirect included), an answer larger than
            ``max_response`` bytes or not JSON.
        """
        url = self.url(path)
        deadline = time.monotonic() + self.timeout
        try:
            resp = self.session.request(
                method, url, json=body, stream=True, allow_redirects=False,
                timeout=(self.timeout, self.timeout))
        except requests.Timeout:
            raise self._no_answer(method, url)
        except requests.RequestException as exc:
            raise ServiceError(
                self.peer, method, url, 'failed: %s' % _cause(exc),
                _HINT_TLS if isinstance(exc, requests.exceptions.SSLError)
                else _HINT_UNREACHABLE, detail=_cause(exc), reached=False)
        with resp:
            if resp.status_code >= 300:
                raise self._status_error(method, url, resp)
            raw = self._read(method, url, resp, deadline, max_response)
        if not raw:
            return resp.status_code, None
        try:
            return resp.status_code, json.loads(raw.decode('utf-8'))
        except ValueError as exc:
            # UnicodeDecodeError is a ValueError too.
            raise ServiceError(self.peer, method, url,
                               'did not answer JSON: %s' % exc,
                               _HINT_NOT_API, detail=str(exc))

    def get(self, path: str, max_response: int = MAX_RESPONSE) -> Any:
        """``GET path``: the JSON answer. :raises ServiceError:"""
        return self.request('GET', path, max_response=max_response)[1]

    def post(self, path: str, body: Any = None) -> Any:
        """``POST path`` with ``body``: the JSON answer.

        :raises ServiceError:
        """
        return self.request('POST', path, body)[1]

    def close(self) -> None:
        """Close its connections."""
        self.session.close()

    def _no_answer(self, method: str, url: str) -> ServiceError:
        why = 'no answer within %g s' % self.timeout
        return ServiceError(self.peer, method, url, 'failed: %s' % why,
                            _HINT_TIMEOUT, detail=why)

    def _read(self, method: str, url: str, resp: requests.Response,
              deadline: float, max_response: int) -> bytes:
        # The socket timeout bounds each read, not the whole body: an
        # answer trickled byte by byte is cut off at the deadline.
        chunks, size = [], 0
        try:
            while True:
                if time.monotonic() > deadline:
                    raise self._no_answer(method, url)
                chunk = resp.raw.read1(65536, decode_content=True)
                if not chunk:
                    return b''.join(chunks)
                size += len(chunk)
                if size > max_response:
                    why = 'answered more than %d bytes' % max_response
                    raise ServiceError(self.peer, method, url, why,
                                       _HINT_NOT_API, detail=why)
                chunks.append(chunk)
        except (urllib3.exceptions.TimeoutError, TimeoutError):
            raise self._no_answer(method, url)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            # Connection reset, a cut-off body...
            raise ServiceError(self.peer, method, url,
                               'failed: %s' % _cause(exc),
                               _HINT_UNREACHABLE, detail=_cause(exc))

    def _status_error(self, method: str, url: str,
                      resp: requests.Response) -> ServiceError:
        status = resp.status_code
        if status < 400:
            detail = 'a redirect to %s' % resp.headers.get('Location', '?')
            hint = _HINT_REDIRECT
        else:
            detail = _error_message(resp)
            hint = (_HINT_AUTH if status in (401, 403) else
                    _HINT_SERVER if status >= 500 else '')
        return ServiceError(self.peer, method, url,
                            'answered %d: %s' % (status, detail), hint,
                            status=status, detail=detail)


def _error_message(resp: requests.Response) -> str:
    """The message of an error answer (this framework's JSON, or text)."""
    try:
        raw = resp.raw.read(_MAX_ERROR, decode_content=True)
    except (urllib3.exceptions.HTTPError, OSError):
        return resp.reason or ''
    try:
        body = json.loads(raw.decode('utf-8'))
        if isinstance(body, dict) and isinstance(body.get('error'), dict):
            return str(body['error'].get('message', resp.reason))
    except ValueError:
        pass
    return raw.decode('utf-8', 'replace')[:200] or resp.reason or ''


def _cause(exc: BaseException) -> str:
    """The innermost reason of a failed call (``Connection refused``).

    requests wraps urllib3's error, which wraps the socket's: their own
    messages add object reprs and retry counts, not information.
    """
    seen = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        reason = getattr(exc, 'reason', None)
        inner = (reason if isinstance(reason, BaseException)
                 else exc.__cause__ or exc.__context__)
        if inner is None or not str(inner):
            break
        exc = inner
    return str(exc) or type(exc).__name__
