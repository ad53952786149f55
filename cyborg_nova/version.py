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

"""The installed version, as pbr computes it."""

import pbr.version

version_info = pbr.version.VersionInfo('cyborg-nova')


def version_string() -> str:
    """The installed release: ``1.0.0``, or ``1.0.0.devN`` before its tag.

    pbr's ``version_string`` would drop the ``.devN`` and print a
    development build as the release it leads to.
    """
    try:
        return version_info.release_string()
    except Exception:
        # Running from a source tree that was never installed.
        return 'unknown'


def release_string() -> str:
    """The release this build is or leads to: ``1.0.0``, without ``.devN``.

    What the REST APIs' OpenAPI documents give as their version: the
    documents in ``doc/source/api`` describe a release, and would
    otherwise change with every commit.
    """
    try:
        return version_info.version_string()
    except Exception:
        return 'unknown'
