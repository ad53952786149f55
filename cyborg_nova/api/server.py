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

"""Serving an :class:`~cyborg_nova.api.app.Application` with cheroot.

cheroot is a threaded, production WSGI server (the one CherryPy uses);
it serves HTTPS itself when a certificate is configured.
"""

from __future__ import annotations

import ipaddress
import logging
import threading

from cheroot.ssl import builtin
from cheroot import wsgi
from oslo_config import cfg

LOG = logging.getLogger(__name__)


def with_auth(conf: cfg.ConfigOpts, group: str, app):
    """``app`` as served: behind keystonemiddleware with Keystone auth.

    With ``auth_strategy = keystone`` the framework trusts the identity
    headers (``X-Identity-Status``, ``X-Roles``); only auth_token, which
    strips any a client sent and sets them from a validated token, may
    stand in front of it.
    """
    if conf[group].auth_strategy != 'keystone':
        return app
    from keystonemiddleware import auth_token
    return auth_token.AuthProtocol(app, {'oslo_config_config': conf})


def is_loopback(host: str) -> bool:
    """Whether ``bind_host`` only takes connections from this host."""
    if host == 'localhost':
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        # Another host name: it may resolve to anything.
        return False


def check_exposure(opts: cfg.ConfigOpts) -> None:
    """Refuse to listen beyond loopback without authentication.

    With ``auth_strategy = token`` and neither ``admin_token`` nor
    ``reader_token`` set, nothing can authenticate: such a service is
    only ever meant for this host.

    :raises ValueError: ``bind_host`` is not a loopback address and no
        authentication is configured.
    """
    if is_loopback(opts.bind_host) or opts.auth_strategy == 'keystone':
        return
    if opts.admin_token or opts.reader_token:
        return
    raise ValueError(
        'refusing to listen on %s, beyond loopback, without '
        'authentication: set admin_token and/or reader_token (or '
        'auth_strategy = keystone), or bind_host = 127.0.0.1'
        % opts.bind_host)


class Server:
    """A started server; :meth:`stop` it when done.

    ``port`` is the bound port (useful with port 0, which picks a free one).

    :raises ValueError: a bad TLS configuration, or see
        :func:`check_exposure`.
    :raises OSError: the address cannot be bound.
    """

    def __init__(self, app, opts: cfg.ConfigOpts, default_port: int,
                 name: str) -> None:
        check_exposure(opts)
        port = opts.bind_port if opts.bind_port is not None else (
            default_port)
        self._server = wsgi.Server((opts.bind_host, port), app,
                                   numthreads=8, server_name=name)
        self.scheme = 'http'
        if opts.ssl_cert_file:
            if not opts.ssl_key_file:
                raise ValueError('ssl_cert_file is set but ssl_key_file '
                                 'is not')
            self._server.ssl_adapter = builtin.BuiltinSSLAdapter(
                opts.ssl_cert_file, opts.ssl_key_file)
            self.scheme = 'https'
        self._server.prepare()
        self.host = opts.bind_host
        self.port = self._server.bind_addr[1]
        self._thread = threading.Thread(target=self._server.serve,
                                        name='%s-api' % name, daemon=True)
        self._thread.start()
        LOG.info('%s API listening on %s', name, self.url)

    @property
    def url(self) -> str:
        host = '[%s]' % self.host if ':' in self.host else self.host
        return '%s://%s:%d' % (self.scheme, host, self.port)

    def stop(self) -> None:
        self._server.stop()
        self._thread.join(10)
