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

"""What cyborg-nova promises about its providers, as plain functions.

The documented contract (``doc/source/admin/names.rst`` and
``doc/source/admin/nova.rst``), written down again here on purpose: the
tests check the cloud against the documentation, not against the code
that produced the cloud. Nothing in this module imports Tempest, so its
functions are unit tested without one.
"""

import re
import uuid

#: The trait on every accelerator provider.
OWNER_TRAIT = 'OWNER_CYBORG'
#: Provider names are ``<nodename>_accelerator_<PCI address>``.
NAME_INFIX = '_accelerator_'
#: A full, lower-case PCI address; the domain has 4 to 8 hex digits.
PCI_ADDRESS_RE = re.compile(
    r'^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$')

#: Provider uuids are ``uuid5(PROVIDER_NAMESPACE, "<nodename>/<address>")``:
#: stable across restarts, rebuilds and releases (a change would orphan
#: every provider an upgrade had already registered).
PROVIDER_NAMESPACE = uuid.UUID('6b2f9d0e-3c4a-5d1e-9f8a-2b7c6d5e4f3a')

#: The resource classes the drivers report (names.rst, "Resource
#: classes"); the ``generic`` driver may add operator-chosen ones.
DOCUMENTED_RESOURCE_CLASSES = frozenset(
    ['PGPU', 'VGPU', 'FPGA', 'CUSTOM_QAT', 'CUSTOM_NIC', 'CUSTOM_PCI'])

#: For each documented resource class, the trait pattern that names the
#: driver family: one of the provider's traits matches it.
FAMILY_TRAITS = {
    'PGPU': re.compile(r'^CUSTOM_NVIDIA_[0-9A-F]{4}$'),
    'VGPU': re.compile(r'^CUSTOM_NVIDIA_[0-9A-F]{4}(_[A-Z0-9_]+)?$'),
    'FPGA': re.compile(r'^CUSTOM_FPGA_(INTEL|XILINX)$'),
    'CUSTOM_QAT': re.compile(r'^CUSTOM_QAT$'),
    'CUSTOM_NIC': re.compile(r'^HW_NIC_SRIOV$'),
    'CUSTOM_PCI': re.compile(r'^CUSTOM_PCI_PRODUCT_ID_[0-9A-F]{4}$'),
}
#: What the ``generic`` driver puts on every device, whatever resource
#: class its ``device_spec`` entry gives.
GENERIC_TRAIT = re.compile(r'^CUSTOM_PCI_PRODUCT_ID_[0-9A-F]{4}$')

#: Resource classes a flavor asks for that are not accelerators.
NOT_ACCELERATORS = frozenset(['VCPU', 'PCPU', 'MEMORY_MB', 'DISK_GB'])

_RESOURCES_KEY = re.compile(r'^resources([a-zA-Z0-9_-]*):([A-Z0-9_]+)$')
_TRAIT_KEY = re.compile(r'^trait([a-zA-Z0-9_-]*):([A-Z0-9_]+)$')


def provider_uuid(nodename, address):
    """The uuid cyborg-nova gives the provider of ``address``."""
    return str(uuid.uuid5(PROVIDER_NAMESPACE,
                          '%s/%s' % (nodename, address)))


def provider_address(name, nodename):
    """The PCI address in accelerator provider ``name``, or None.

    :param name: a resource provider's name.
    :param nodename: the name of its root provider, the compute node.
    :return: the address when ``name`` is
        ``<nodename>_accelerator_<PCI address>``, else None.
    """
    prefix = nodename + NAME_INFIX
    if not name.startswith(prefix):
        return None
    address = name[len(prefix):]
    return address if PCI_ADDRESS_RE.match(address) else None


def is_accelerator_name(name):
    """Whether a provider name looks like an accelerator's (any node)."""
    head, infix, address = name.rpartition(NAME_INFIX)
    return bool(head and infix and PCI_ADDRESS_RE.match(address))


def trait_problems(resource_classes, traits):
    """Why ``traits`` are not what a provider of these classes carries.

    :param resource_classes: the classes in the provider's inventory.
    :param traits: the provider's traits.
    :return: a list of messages, empty when all is well.
    """
    traits = set(traits)
    problems = []
    if OWNER_TRAIT not in traits:
        problems.append('no %s trait' % OWNER_TRAIT)
    generic = any(GENERIC_TRAIT.match(t) for t in traits)
    for rc in sorted(resource_classes):
        family = FAMILY_TRAITS.get(rc)
        if family is None or generic:
            continue
        if not any(family.match(t) for t in traits):
            problems.append('resource class %s but no trait matching %s'
                            % (rc, family.pattern))
    return problems


def request_groups(extra_specs):
    """The Placement request groups of a flavor's extra specs.

    :param extra_specs: ``{key: value}``, such as
        ``{'resources:FPGA': '1', 'trait:CUSTOM_FPGA_INTEL': 'required'}``.
    :return: ``{suffix: {'resources': {rc: amount}, 'required': set,
        'forbidden': set}}``; the unnumbered group has suffix ``''``.
        Groups without resources are left out.
    """
    groups = {}

    def group(suffix):
        return groups.setdefault(suffix, {'resources': {}, 'required': set(),
                                          'forbidden': set()})

    for key, value in extra_specs.items():
        found = _RESOURCES_KEY.match(key)
        if found:
            amount = int(value)
            if amount > 0:
                group(found.group(1))['resources'][found.group(2)] = amount
            continue
        found = _TRAIT_KEY.match(key)
        if found and value in ('required', 'forbidden'):
            group(found.group(1))[value].add(found.group(2))
    return {suffix: g for suffix, g in groups.items() if g['resources']}


def accelerator_groups(groups):
    """The groups of :func:`request_groups` that ask for accelerators.

    Their non-accelerator resources (``VCPU``...) are dropped.
    """
    result = {}
    for suffix, g in groups.items():
        resources = {rc: n for rc, n in g['resources'].items()
                     if rc not in NOT_ACCELERATORS}
        if resources:
            result[suffix] = dict(g, resources=resources)
    return result


def group_names(groups):
    """Every trait and resource class the request ``groups`` name."""
    traits, resource_classes = set(), set()
    for g in groups.values():
        traits |= g['required'] | g['forbidden']
        resource_classes |= set(g['resources'])
    return traits, resource_classes


def restrict_to_known(groups, known_traits, known_resource_classes):
    """``groups`` as Placement can be asked for them, or None.

    Placement answers 400 to a request naming a trait or resource class
    it does not know, rather than "no candidates".

    :return: None when a group requires an unknown trait or resource
        class (no provider can satisfy it); else the groups without
        their unknown forbidden traits (which no provider has).
    """
    result = {}
    for suffix, g in groups.items():
        if (g['required'] - set(known_traits)
                or set(g['resources']) - set(known_resource_classes)):
            return None
        result[suffix] = dict(g, forbidden=g['forbidden'] & set(
            known_traits))
    return result


def candidate_query(groups):
    """``GET /allocation_candidates`` parameters for request ``groups``.

    Needs Placement microversion 1.35 (``root_required``): like Nova, it
    leaves out compute nodes that are disabled.
    """
    params = {'root_required': '!COMPUTE_STATUS_DISABLED'}
    for suffix, g in sorted(groups.items()):
        params['resources%s' % suffix] = ','.join(
            '%s:%d' % (rc, n) for rc, n in sorted(g['resources'].items()))
        traits = sorted(g['required']) + [
            '!%s' % t for t in sorted(g['forbidden'])]
        if traits:
            params['required%s' % suffix] = ','.join(traits)
    if len(groups) > 1:
        params['group_policy'] = 'none'
    return params


def candidate_providers(candidates, resource_class):
    """Providers of ``resource_class`` in allocation candidates.

    :param candidates: a ``GET /allocation_candidates`` body (1.12+).
    :return: the uuids that appear in a candidate's allocations with
        that class.
    """
    found = set()
    for request in candidates.get('allocation_requests', []):
        for rp_uuid, alloc in request['allocations'].items():
            if resource_class in alloc['resources']:
                found.add(rp_uuid)
    return found


def free_slots(candidates, resource_class, amount):
    """How many more servers asking for ``amount`` of a class fit.

    Counted from the ``provider_summaries`` of the providers that offer
    the class in ``candidates``: each holds ``(capacity - used) //
    amount`` more.
    """
    slots = 0
    summaries = candidates.get('provider_summaries', {})
    for rp_uuid in candidate_providers(candidates, resource_class):
        resource = summaries[rp_uuid]['resources'][resource_class]
        slots += max(0, resource['capacity'] - resource['used']) // amount
    return slots
