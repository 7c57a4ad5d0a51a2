"""Files replaced whole: written beside their final name, then renamed over it.

A server that reloads its certificate when the files change (server_credentials) may read
them at any moment; a rename is atomic, so it reads the old file or the new one, never one
half written. The file has its mode from the moment it exists, so a key is never readable by
others, not even while it is being written.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

#: Private keys: their owner alone may read them.
PRIVATE_MODE = 0o600
#: Certificates and CA bundles: public.
PUBLIC_MODE = 0o644


def write_atomically(path: Path, content: bytes, *, mode: int) -> None:
    """Replaces path with a file holding content, with mode (whatever the umask)."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(descriptor, "wb") as file:
            os.fchmod(file.fileno(), mode)  # os.open's mode is narrowed by the umask
            file.write(content)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
