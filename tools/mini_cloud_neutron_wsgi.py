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
