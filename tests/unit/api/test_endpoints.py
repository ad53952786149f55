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

"""Endpoint normalisation: the spec's bare host:port becomes a URL."""

import pytest

from cyborg_nova.api import endpoints


@pytest.mark.parametrize('endpoint, url, host', [
    # The internal API spec's examples, as printed.
    ('localhost:1337', 'http://localhost:1337', 'localhost'),
    ('compute-whatever:1337', 'http://compute-whatever:1337',
     'compute-whatever'),
    ('[::1]:1337', 'http://[::1]:1337', '::1'),
    ('[fd00::5]', 'http://[fd00::5]', 'fd00::5'),
    ('cn1', 'http://cn1', 'cn1'),
    ('10.0.0.7:6666/agent/', 'http://10.0.0.7:6666/agent', '10.0.0.7'),
    ('cn1:1', 'http://cn1:1', 'cn1'),
    ('cn1:65535', 'http://cn1:65535', 'cn1'),
    # URLs are kept, less a trailing slash.
    ('https://cn1.example.org:8443/', 'https://cn1.example.org:8443',
     'cn1.example.org'),
    ('http://[fd00::5]:80/x', 'http://[fd00::5]:80/x', 'fd00::5'),
])
def test_good(endpoint, url, host):
    assert endpoints.normalize(endpoint) == url
    assert endpoints.host_of(url) == host
    # Normalising is idempotent.
    assert endpoints.normalize(url) == url


@pytest.mark.parametrize('endpoint, reason', [
    ('', 'it is empty'),
    (None, 'it is empty'),
    ('cn1:0', 'a number from 1 to 65535'),
    ('cn1:65536', 'a number from 1 to 65535'),
    ('cn1:-1', 'a number from 1 to 65535'),
    ('cn1:+80', 'a number from 1 to 65535'),
    ('cn1:', 'a number from 1 to 65535'),
    ('cn1:http', 'a number from 1 to 65535'),
    ('[::1]:0', 'a number from 1 to 65535'),
    ('user:pw@cn1:80', 'credentials are not allowed'),
    ('https://user@cn1', 'credentials are not allowed'),
    ('cn1:80?x=1', 'a query or a fragment'),
    ('cn1:80/#top', 'a query or a fragment'),
    ('cn1:80/?', 'a query or a fragment'),
    ('ftp://cn1', 'the scheme must be http or https'),
    ('cn_1:80', 'neither a host name nor an IPv4 address'),
    ('-cn1:80', 'neither a host name nor an IPv4 address'),
    ('cn1..example:80', 'neither a host name nor an IPv4 address'),
    ('%s:80' % ('a' * 64), 'neither a host name nor an IPv4 address'),
    ('fd00::5:80', 'an IPv6 address must be in brackets'),
    ('[cn1]:80', 'it is not a URL'),
    ('[1.2.3.4]:80', 'it is not a URL'),
    ('[::1]80', 'written [address] or [address]:port'),
    ('[::1', 'not a URL'),
    ('http://:80', 'it has no host'),
    ('http:///x', 'it has no host'),
    ('cn1 :80', 'whitespace or control characters'),
    ('cn1:80\n', 'whitespace or control characters'),
    ('cn1:80/a"b', 'the path has characters'),
])
def test_bad(endpoint, reason):
    with pytest.raises(endpoints.InvalidEndpoint) as error:
        endpoints.normalize(endpoint)
    assert reason in error.value.reason
    assert str(error.value).startswith('endpoint %r: ' % (endpoint,))
