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

"""The endpoints services announce in ``POST /hello``, normalised.

The internal API spec writes them as ``host:port`` (``"localhost:1337"``,
``"compute-whatever:1337"``); the services call them as URLs. Both
forms are taken: :func:`normalize` turns a bare ``host``, ``host:port``
or ``[v6]:port`` into ``http://host:port``, checks the result strictly
and returns the one spelling the rest of the code sees (no trailing
slash), so ``/hardware`` and the like can be appended to it.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse

#: What a JSON schema can check of an endpoint (the rest is
#: :func:`normalize`'s): an optional http(s) scheme, a host (name, IPv4
#: or [IPv6]) with an optional port, an optional RFC 3986 path.
PATTERN = (r"^(https?://)?[A-Za-z0-9._:\[\]-]+"
           r"(/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*)?$")

_LABEL = r'[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?'
#: A DNS name (RFC 1123 labels), at most 253 characters.
HOSTNAME = re.compile(r'(?=.{1,253}$)%s(\.%s)*' % (_LABEL, _LABEL))
_PATH = re.compile(r"(/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*)?")
_PORT = re.compile(r'[0-9]{1,5}')


class InvalidEndpoint(ValueError):
    """An endpoint that is not an http(s) URL a service can call.

    ``reason`` says what is wrong; the message names the endpoint too.
    """

    def __init__(self, endpoint: str, reason: str) -> None:
        super().__init__('endpoint %r: %s' % (endpoint, reason))
        self.reason = reason


class _Bad(ValueError):
    """What is wrong with a part of an endpoint."""


def _host_kind(host: str) -> str:
    """'name', 'ipv4' or '' (neither) for the host part of a netloc."""
    try:
        ipaddress.IPv4Address(host)
        return 'ipv4'
    except ValueError:
        pass
    return 'name' if HOSTNAME.fullmatch(host) else ''


def _split_netloc(netloc: str) -> tuple[str, int | None]:
    """(host, port) of ``netloc``; an IPv6 host without its brackets.

    :raises _Bad: saying what is wrong with it.
    """
    if '@' in netloc:
        raise _Bad('credentials are not allowed')
    if netloc.startswith('['):
        host, bracket, rest = netloc[1:].partition(']')
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise _Bad('[%s] is not an IPv6 address' % host)
        if not bracket or (rest and not rest.startswith(':')):
            raise _Bad('an IPv6 address is written [address] or '
                       '[address]:port')
        port = rest[1:] if rest else None
    else:
        host, colon, port = netloc.partition(':')
        if ':' in port:
            raise _Bad('an IPv6 address must be in brackets: '
                       '[address]:port')
        if not host:
            raise _Bad('it has no host')
        if not _host_kind(host):
            raise _Bad('%r is neither a host name nor an IPv4 address'
                       % host)
        port = port if colon else None
    if port is None:
        return host, None
    if not _PORT.fullmatch(port) or not 1 <= int(port) <= 65535:
        raise _Bad('the port must be a number from 1 to 65535, not %r'
                   % port)
    return host, int(port)


def normalize(endpoint: str) -> str:
    """``endpoint`` as an http(s) URL without a trailing slash.

    A bare ``host``, ``host:port`` or ``[v6]:port`` (the spec's form) is
    taken as ``http://`` it. No credentials, query or fragment; the host
    is a DNS name, an IPv4 address or a bracketed IPv6 address; the port
    is 1 to 65535.

    :raises InvalidEndpoint: with a message saying what is wrong.
    """
    try:
        return _normalize(endpoint)
    except _Bad as exc:
        raise InvalidEndpoint(endpoint, str(exc))


def _normalize(endpoint: str) -> str:
    if not isinstance(endpoint, str) or not endpoint:
        raise _Bad('it is empty')
    if any(c.isspace() or not c.isprintable() for c in endpoint):
        raise _Bad('it contains whitespace or control characters')
    url = endpoint if '://' in endpoint else 'http://' + endpoint
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as exc:
        raise _Bad('it is not a URL: %s' % exc)
    if parts.scheme not in ('http', 'https'):
        raise _Bad('the scheme must be http or https (or none, for '
                   'http)')
    if parts.query or parts.fragment or '?' in url or '#' in url:
        raise _Bad('a query or a fragment is not allowed')
    _split_netloc(parts.netloc)
    if not _PATH.fullmatch(parts.path):
        raise _Bad('the path has characters a URL path cannot have')
    return url.rstrip('/')


def host_of(url: str) -> str:
    """The host part of a :func:`normalize`\\ d URL (IPv6 unbracketed)."""
    return _split_netloc(urllib.parse.urlsplit(url).netloc)[0]
