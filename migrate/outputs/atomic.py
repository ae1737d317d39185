"""Atomic file writes: a reader sees the old file or the new one, never half of either.

The data goes to a temporary file in the destination's directory (same file system), is flushed
to disk, and then ``os.replace`` swaps it in. No input file is ever lost or half-written.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import suppress
from pathlib import Path
from typing import Optional


def _default_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_atomic(path: Path, data: bytes, mode: Optional[int] = None) -> None:
    """Write ``data`` to ``path``; ``mode`` defaults to the replaced file's mode, else the umask's."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        mode = path.stat().st_mode & 0o7777 if path.is_file() else _default_mode()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def link_atomic(path: Path, target: str) -> None:
    """Make ``path`` a symbolic link to ``target``, replacing what was there."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}.link.tmp"
    with suppress(FileNotFoundError):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, path)
