"""Reading the files of PATH safely, and the names that can go into a patch and a report.

Every read of a user file goes through ``read_source``: opened without following a symbolic link
(a link is never migrated through, so a link named ``npu_glue.py`` or ``model.py`` cannot pull
another file's content, e.g. ``/etc/passwd``, into the patch), only regular files, and at most
``max_bytes`` (checked with ``fstat`` before anything is read). Failures are ``SourceError``s with
the diagnostic code and a message; nothing here raises anything else for a bad file.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Optional

from . import diagnostics

_NOFOLLOW = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)


class SourceError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def read_source(path: Path, max_bytes: Optional[int] = None) -> bytes:
    """The bytes of the regular file ``path`` (not through a final symbolic link), at most ``max_bytes``."""
    try:
        fd = os.open(path, _NOFOLLOW)
    except OSError as exc:
        if os.path.islink(path):
            raise SourceError(diagnostics.READ_ERROR, "is a symbolic link; links are never read") from exc
        raise SourceError(diagnostics.READ_ERROR, f"cannot be read: {exc.strerror or exc}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SourceError(diagnostics.READ_ERROR, "is not a regular file")
        if max_bytes is not None and info.st_size > max_bytes:
            raise SourceError(diagnostics.TOO_LARGE, f"is {info.st_size:,} bytes, over the {max_bytes:,}-byte limit "
                                                     "(--max-file-size); not migrated")
        chunks = []
        remaining = info.st_size + 1  # one byte more: a file that grew is detected
        while True:
            chunk = os.read(fd, max(remaining, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
            if max_bytes is not None and sum(map(len, chunks)) > max_bytes:
                raise SourceError(diagnostics.TOO_LARGE, f"grew over the {max_bytes:,}-byte limit while it was read "
                                                         "(--max-file-size); not migrated")
        return b"".join(chunks)
    except OSError as exc:
        raise SourceError(diagnostics.READ_ERROR, f"cannot be read: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


def display(path: str) -> str:
    """``path`` as printable text: undecodable bytes as ``\\xNN``, control characters escaped."""
    raw = os.fsencode(path)
    text = raw.decode("utf-8", "backslashreplace")
    return "".join(ch if ch.isprintable() or ch == " " else ch.encode("unicode_escape").decode("ascii") for ch in text)


def name_problem(path: str) -> Optional[str]:
    """Why ``path`` cannot be written into a patch or a report, or None when it can."""
    try:
        os.fsencode(path).decode("utf-8")
    except UnicodeDecodeError:
        return "the file name is not UTF-8 text; not migrated (copied unchanged)"
    if any(not (ch.isprintable() or ch == " ") for ch in path):
        return "the file name has control characters (a newline, a tab...); not migrated (copied unchanged)"
    if any(part in ("", ".", "..") for part in path.split("/")):
        return "the file name is not a plain relative path; not migrated"
    return None
