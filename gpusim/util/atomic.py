"""Atomic file output: write to a temporary file beside the target, then rename.

A command that fails half-way (a user error, Ctrl-C, a full disk) never leaves half a
file behind: the target either keeps its old content or gets the whole new one.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager


@contextmanager
def atomic_path(path: str, suffix: str = ""):
    """Yield a temporary path in ``path``'s folder; on success it replaces ``path`` (with
    the permissions a plain ``open()`` would give), on any failure it is removed.

    ``suffix`` keeps the extension for writers that infer the format from the name.
    """
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".gpusim-", suffix=suffix)
    os.close(fd)
    try:
        yield tmp
        mask = os.umask(0)          # mkstemp makes files private; give the usual mode
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write(path: str, data) -> None:
    """Write ``data`` (str as UTF-8, or bytes) to ``path`` atomically."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
