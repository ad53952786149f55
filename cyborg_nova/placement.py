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

"""Reaching Placement for read-only commands (``cyborg-nova tree``).

Credentials come from the usual places: the ``[placement]`` section of a
config file (as nova.conf has it on a compute), or the openstack CLI's
``OS_*`` environment / ``--os-*`` options. Writes to Placement are made
by Nova's report client, not here.
"""

from __future__ import annotations

import argparse
import sys
import urllib.parse

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

GROUP = 'placement'
#: Enough for ``in_tree``, ``root_provider_uuid`` and required traits.
MICROVERSION = '1.14'


class PlacementError(Exception):
    """Placement could not be reached or refused a request."""


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


def get(client: ks_adapter.Adapter, url: str) -> dict:
    """GET ``url`` and return the JSON body.

    :raises PlacementError: Placement is unreachable or answered an error.
    """
    try:
        resp = client.get(url, raise_exc=False)
    except ks_exc.ClientException as exc:
        raise PlacementError('cannot reach Placement: %s' % exc)
    if resp.status_code != 200:
        raise PlacementError('Placement answered %s to GET %s: %s'
                             % (resp.status_code, url, resp.text[:300]))
    return resp.json()


def provider_tree(client: ks_adapter.Adapter,
                  host: str | None = None) -> list[dict]:
    """Providers with inventory, usage and traits, roots first, by tree.

    With ``host``, only the tree whose root provider is named ``host``
    (the compute node's hypervisor hostname).

    :raises PlacementError: as :func:`get`; also when ``host`` has no
        provider.
    """
    url = '/resource_providers'
    if host:
        roots = get(client, '/resource_providers?name=%s'
                    % urllib.parse.quote(host, safe=''))
        if not roots['resource_providers']:
            raise PlacementError('no resource provider named %r' % host)
        url += '?in_tree=%s' % roots['resource_providers'][0]['uuid']
    providers = get(client, url)['resource_providers']
    for rp in providers:
        base = '/resource_providers/%s' % rp['uuid']
        rp['inventories'] = get(client, base + '/inventories')['inventories']
        rp['usages'] = get(client, base + '/usages')['usages']
        rp['traits'] = sorted(get(client, base + '/traits')['traits'])
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
