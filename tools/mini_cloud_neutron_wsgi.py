"""Neutron's API application, its database mappers configured first.

Neutron's port queries name ``Port.port_forwardings``, a back-reference
SQLAlchemy adds only when the mappers are configured, which the first
query does: so the very first ``GET /v2.0/ports`` of a fresh API process
fails with an AttributeError (neutron 29). The mini-cloud serves this
module instead of ``neutron.wsgi.api`` to configure them at start-up.
"""

from neutron.wsgi.api import application  # noqa: F401
from sqlalchemy import orm

orm.configure_mappers()
