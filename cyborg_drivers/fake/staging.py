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

"""A sysfs tree written aside and renamed into place, whole or not at all.

Standard library only: the capture tool runs where nothing else of the
project is installed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from typing import Iterator


@contextlib.contextmanager
def staged(dest: str) -> Iterator[str]:
    """A new directory to fill; renamed to ``dest`` if the block succeeds.

    ``dest`` must be absent or an empty directory. The directory is a
    sibling of ``dest`` (so the rename stays on one file system), mode
    0755 like sysfs's; a failing block leaves ``dest`` untouched and the
    directory removed.

    :raises FileExistsError: ``dest`` exists and is not an empty directory.
    """
    if os.path.lexists(dest) and (not os.path.isdir(dest)
                                  or os.listdir(dest)):
        raise FileExistsError(errno.EEXIST, 'destination exists and is not '
                              'an empty directory', dest)
    parent = os.path.dirname(dest)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix='.%s.' % os.path.basename(dest),
                           dir=parent)
    try:
        # A directory, and sysfs directories are 0755: the tree must read
        # like the real one for unprivileged readers too.
        os.chmod(tmp, 0o755)  # nosec B103
        yield tmp
        # rename(2) replaces an empty directory atomically.
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
