"""Serving an :class:`~cyborg_nova.api.app.Application` with cheroot.

cheroot is a threaded, production WSGI server (the one CherryPy uses);
it serves HTTPS itself when a certificate is configured.
"""

from __future__ import annotations

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


class Server:
    """A started server; :meth:`stop` it when done.

    ``port`` is the bound port (useful with port 0, which picks a free one).
    """

    def __init__(self, app, opts: cfg.ConfigOpts, default_port: int,
                 name: str) -> None:
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
