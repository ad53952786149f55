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

"""A Tempest REST client of the cyborg-nova conductor-lite.

The conductor-lite is not in the Keystone catalog and, with
``auth_strategy = token``, takes a static token: the client is given its
endpoint and token instead of Keystone credentials.
"""

from urllib import parse

from oslo_serialization import jsonutils as json
from tempest.lib.common import rest_client

from cyborg_nova_tempest_plugin.services import schemas


class StaticTokenAuthProvider(object):
    """Sends requests to a fixed endpoint with a fixed ``X-Auth-Token``.

    The part of :class:`tempest.lib.auth.AuthProvider` that
    :class:`~tempest.lib.common.rest_client.RestClient` uses.

    :param endpoint: the API's base URL, such as ``http://ctl:6667``.
    :param token: the token; None sends no ``X-Auth-Token`` header.
    """

    credentials = None

    def __init__(self, endpoint, token=None):
        self.endpoint = endpoint.rstrip('/')
        self.token = token

    def base_url(self, filters, auth_data=None):
        return self.endpoint

    def get_token(self):
        return self.token

    def auth_request(self, method, url, headers=None, body=None,
                     filters=None):
        """The full URL, the headers with the token, and the body."""
        headers = dict(headers or {})
        if self.token is not None:
            headers['X-Auth-Token'] = self.token
        if not parse.urlsplit(url).scheme:
            url = '%s/%s' % (self.endpoint, url.lstrip('/'))
        return url, headers, body


class ConductorClient(rest_client.RestClient):
    """The conductor-lite's API: agents, hardware and FPGA programs.

    :param endpoint: the conductor-lite's base URL (``[accelerators]
        conductor_endpoint``).
    :param token: its admin token (``[accelerators] conductor_token``);
        None to send none, as the negative tests do.
    :param kwargs: the keyword arguments of :class:`RestClient` past
        ``region`` (timeouts, TLS settings).
    """

    def __init__(self, endpoint, token=None, **kwargs):
        super(ConductorClient, self).__init__(
            StaticTokenAuthProvider(endpoint, token),
            'cyborg-nova-conductor', None, **kwargs)

    def _parse_resp(self, body, top_key_to_verify=None):
        """The JSON body as it is, for the exceptions' ``resp_body``.

        :class:`RestClient` unwraps a body of one key; here an error keeps
        its ``{"error": ...}`` envelope, as the API sends it.
        """
        try:
            return json.loads(body)
        except ValueError:
            return body

    def _get_json(self, url, schema):
        resp, body = self.get(url)
        body = json.loads(body)
        self.validate_response(schema, resp, body)
        return rest_client.ResponseBody(resp, body)

    def list_agents(self):
        """``GET /agents``: every agent, UP or DOWN."""
        return self._get_json('agents', schemas.list_agents)

    def list_hardware(self):
        """``GET /hardware``: every UP agent's devices, with usages."""
        return self._get_json('hardware', schemas.list_hardware)

    def hello(self, body):
        """``POST /hello``: register an agent, or its heartbeat.

        :param body: a dict, sent as JSON, or a str sent as it is (the
            negative tests send bodies that are not JSON).
        """
        if not isinstance(body, str):
            body = json.dumps(body)
        resp, body = self.post('hello', body)
        body = json.loads(body)
        return rest_client.ResponseBody(resp, body)

    def create_program(self, host, device, bitstream, region=None):
        """``POST /programs``: load a bitstream into an unallocated FPGA.

        The conductor-lite passes the job to the agent of ``host``, which
        fences the device's provider, proves it unallocated (or refuses:
        409, naming the instances), programs, verifies, swaps the
        function trait and unfences.

        :param host: the agent's host (the compute's Nova nodename).
        :param device: PCI address, provider uuid or provider name.
        :param bitstream: a library entry or file name under the host's
            ``[cyborg_nova] bitstream_dir``.
        """
        body = {'host': host, 'device': device, 'bitstream': bitstream}
        if region:
            body['region'] = region
        resp, body = self.post('programs', json.dumps(body))
        self.expected_success([202], resp.status)
        body = json.loads(body)
        return rest_client.ResponseBody(resp, body)

    def show_program(self, program_id):
        """``GET /programs/{id}``: a programming job and its journal."""
        resp, body = self.get('programs/%s' % program_id)
        self.expected_success(200, resp.status)
        return rest_client.ResponseBody(resp, json.loads(body))
