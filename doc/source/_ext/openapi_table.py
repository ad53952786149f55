# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.

"""``.. openapi:: FILE``: an OpenAPI 3.0 document as one section per operation.

FILE is a JSON document written by ``tools/openapi_docs.py``, relative to
the page. Each operation becomes a section titled ``METHOD PATH`` with a
table (method, path, summary, operation id, policy rule and its default,
request body, responses), followed by one table per schema (request body,
success response) listing every field by its dotted path. The document
is only read: the build needs neither network access nor the services.
"""

from __future__ import annotations

import json
import os

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.util import nodes as sphinx_nodes

METHODS = ('get', 'put', 'post', 'patch', 'delete')
# Characters that start inline markup in free text.
_SPECIAL = '\\*`|_[]<>'


def escape(text: str) -> str:
    """``text`` as literal RST text (inline markup characters escaped)."""
    return ''.join('\\' + c if c in _SPECIAL else c
                   for c in ' '.join(str(text).split()))


def literal(text) -> str:
    """``text`` as an inline literal."""
    text = str(text)
    if not text or '``' in text or text != text.strip():
        return escape(repr(text))
    return '``%s``' % text


def policy_defaults() -> dict[str, str]:
    """Rule name -> default check string, from the installed rules."""
    try:
        from cyborg_nova import policies
    except ImportError:
        return {}
    return {rule.name: rule.check_str for rule in policies.list_rules()}


def type_of(schema: dict) -> str:
    """A one-line description of a schema's type and constraints."""
    kind = schema.get('type', 'any')
    if kind == 'array':
        items = schema.get('items', {})
        kind = 'array of %s' % items.get('type', 'any')
    parts = [kind]
    if 'format' in schema:
        parts.append('format %s' % schema['format'])
    if 'enum' in schema:
        parts.append('one of %s' % ', '.join(
            literal(json.dumps(v)) for v in schema['enum']))
    if 'pattern' in schema:
        parts.append('matching %s' % literal(schema['pattern']))
    if 'minLength' in schema and 'maxLength' in schema:
        parts.append('%s to %s characters' % (schema['minLength'],
                                              schema['maxLength']))
    elif 'minLength' in schema:
        parts.append('at least %s character%s' % (
            schema['minLength'], '' if schema['minLength'] == 1 else 's'))
    elif 'maxLength' in schema:
        parts.append('at most %s characters' % schema['maxLength'])
    for key, text in (('minimum', 'at least %s'),
                      ('maximum', 'at most %s'),
                      ('maxItems', 'at most %s items')):
        if key in schema:
            parts.append(text % schema[key])
    extra = schema.get('additionalProperties')
    if schema.get('type') == 'object':
        if extra is False:
            parts.append('no other keys')
        elif isinstance(extra, dict):
            parts.append('values: %s' % type_of(extra))
        elif 'properties' not in schema:
            parts.append('free-form')
    if schema.get('nullable'):
        parts.append('or null')
    return ', '.join(parts)


Row = tuple[str, str, str, str]


def fields(schema: dict, prefix: str = '') -> list[Row]:
    """(dotted path, type, required, description) of every field."""
    rows = []
    if schema.get('type') == 'array':
        return fields(schema.get('items', {}), prefix + '[]')
    required = set(schema.get('required', ()))
    for name, sub in schema.get('properties', {}).items():
        path = '%s.%s' % (prefix, name) if prefix else name
        rows.append((path, type_of(sub),
                     'yes' if name in required else 'no',
                     sub.get('description', '')))
        if sub.get('type') == 'object' and 'properties' in sub:
            rows.extend(fields(sub, path))
        elif sub.get('type') == 'array':
            items = sub.get('items', {})
            if items.get('type') == 'object' and 'properties' in items:
                rows.extend(fields(items, path + '[]'))
    return rows


def list_table(title: str, header: list[str] | None,
               rows: list[list[str]], widths: str) -> list[str]:
    lines = [('.. list-table:: %s' % title).rstrip(),
             '   :widths: %s' % widths]
    if header:
        lines.append('   :header-rows: 1')
        rows = [header] + rows
    else:
        lines.append('   :stub-columns: 1')
    lines.append('')
    for row in rows:
        first = True
        for cell in row:
            lines.append(('   %s %s' % ('* -' if first else '  -',
                                        cell)).rstrip())
            first = False
    lines.append('')
    return lines


def schema_table(title: str, schema: dict) -> list[str]:
    rows = fields(schema)
    if not rows:
        return ['%s: %s.' % (title, type_of(schema)), '']
    return list_table(
        '%s (%s)' % (title, type_of(schema)),
        ['Field', 'Type', 'Required', 'Description'],
        [[literal(path), kind, req, escape(text)]
         for path, kind, req, text in rows],
        '25 35 10 30')


def status_text(code: str, response: dict, summary: str = '') -> str:
    """The status code, with its description unless it repeats ``summary``."""
    description = response.get('description', '')
    if not description or description == summary:
        return literal(code)
    return '%s %s' % (literal(code), escape(description))


def operation(method: str, path: str, op: dict,
              defaults: dict[str, str]) -> list[str]:
    title = '%s %s' % (method.upper(), path)
    lines = [escape(title), '-' * len(escape(title)), '']
    rule = op.get('x-policy-rule', '')
    rule_text = literal(rule) if rule else 'none'
    if rule in defaults:
        rule_text += ', default %s' % literal(defaults[rule])
    body = op.get('requestBody')
    responses = op.get('responses', {})
    success = sorted(c for c in responses if c.startswith('2'))
    errors = sorted(c for c in responses if not c.startswith('2'))
    rows = [
        ['Method', literal(method.upper())],
        ['Path', literal(path)],
        ['Summary', escape(op.get('summary', ''))],
        ['Operation id', literal(op.get('operationId', ''))],
        ['Policy rule', rule_text],
        ['Request body', 'JSON, required; see below' if body else 'none'],
        ['Success', ', '.join(status_text(c, responses[c],
                                          op.get('summary', ''))
                              for c in success)],
        ['Errors', ', '.join(status_text(c, responses[c])
                             for c in errors)
         + '; each with the error body'],
    ]
    lines += list_table('', None, rows, '20 80')
    if body:
        schema = body['content']['application/json']['schema']
        lines += schema_table('Request body', schema)
    for code in success:
        content = responses[code].get('content', {})
        if 'application/json' in content:
            lines += schema_table(
                'Response %s' % code,
                content['application/json']['schema'])
    return lines


class OpenAPIDirective(Directive):
    """Renders every operation of an OpenAPI document."""

    required_arguments = 1
    has_content = False
    option_spec = {'methods': directives.unchanged}

    def run(self):
        env = self.state.document.settings.env
        rel, path = env.relfn2path(self.arguments[0], env.docname)
        env.note_dependency(rel)
        try:
            with open(path, encoding='utf-8') as f:
                document = json.load(f)
        except (OSError, ValueError) as exc:
            raise self.error('cannot read OpenAPI document %s: %s'
                             % (self.arguments[0], exc))
        defaults = policy_defaults()
        lines: list[str] = []
        for api_path, item in document.get('paths', {}).items():
            for method in METHODS:
                if method in item:
                    lines += operation(method, api_path, item[method],
                                       defaults)
        node = nodes.section()
        node.document = self.state.document
        sphinx_nodes.nested_parse_with_titles(
            self.state, StringList(lines, source=os.path.basename(path)),
            node)
        return node.children


def setup(app):
    app.add_directive('openapi', OpenAPIDirective)
    return {'version': '1.0', 'parallel_read_safe': True,
            'parallel_write_safe': True}
