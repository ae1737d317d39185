"""Atomic writes that never follow a symbolic link.

``write_atomic`` (reports, parity JSON): the data goes to a temporary file in the destination's
directory, is flushed to disk, and ``os.replace`` swaps it in; a reader sees the old file or the
new one, never half of either.

``OutputDir`` (the migrated tree, in-place changes): every path is walked from the resolved root one
directory at a time with ``O_NOFOLLOW``, relative to the parent's descriptor, so a symbolic link
anywhere inside the output (``out/pkg -> /etc``) is refused instead of followed; the final rename
replaces a link that sits where a file goes by the file itself (``rename`` never follows). The
temporary file can live in a separate staging directory on the same file system (the in-place
journal's, or one at the top of the output tree), so an interrupted run leaves its temporary files
in one place, which the next run clears; where a file is staged beside its target, the temporary
name is unique to the run (its pid and a random token), so two runs never write one temporary file.
"""

from __future__ import annotations

import errno
import os
import secrets
import tempfile
from contextlib import suppress
from pathlib import Path
from typing import Dict, Optional

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
FATAL_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}  # the next write would fail the same way


def _default_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_atomic(path: Path, data: bytes, mode: Optional[int] = None) -> None:
    """Write ``data`` to ``path``; ``mode`` defaults to the replaced file's mode, else the umask's."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        mode = path.stat().st_mode & 0o7777 if path.is_file() and not path.is_symlink() else _default_mode()
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
    tmp = path.parent / f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.link.tmp"
    os.symlink(target, tmp)
    try:
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


class LinkInPath(OSError):
    """A directory on the way to an output file is a symbolic link (or not a directory)."""


class OutputDir:
    """Writes below one resolved directory, never through a link; use as a context manager."""

    def __init__(self, root: Path, *, durable: bool = True, staging: Optional[Path] = None) -> None:
        self.root = Path(root)
        self.durable = durable
        self.token = f"{os.getpid()}-{secrets.token_hex(4)}"  # this writer's temporary names
        self.root.mkdir(parents=True, exist_ok=True)
        self._dirs: Dict[str, int] = {"": os.open(self.root, _DIR_FLAGS)}
        self._staging: Optional[int] = None
        if staging is not None:
            Path(staging).mkdir(parents=True, exist_ok=True)
            fd = os.open(staging, _DIR_FLAGS)
            if os.fstat(fd).st_dev == os.fstat(self._dirs[""]).st_dev:
                self._staging = fd
            else:
                os.close(fd)  # another file system: rename cannot cross it, stage beside the target

    def __enter__(self) -> "OutputDir":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for fd in [*self._dirs.values(), *([self._staging] if self._staging is not None else [])]:
            with suppress(OSError):
                os.close(fd)
        self._dirs.clear()
        self._staging = None

    def _dir(self, rel_dir: str) -> int:
        """The descriptor of ``rel_dir`` (created if missing), refusing links on the way."""
        if rel_dir in self._dirs:
            return self._dirs[rel_dir]
        parent, _, name = rel_dir.rpartition("/")
        parent_fd = self._dir(parent)
        with suppress(FileExistsError):
            os.mkdir(name, dir_fd=parent_fd)
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                where = self.root / rel_dir
                raise LinkInPath(exc.errno, "is a symbolic link or not a directory; writes never follow links",
                                 str(where)) from exc
            raise
        self._dirs[rel_dir] = fd
        return fd

    def temp_name(self, name: str) -> str:
        """Where a file's temporary copy goes when it is staged beside the target (unique to this writer)."""
        return f".{name}.{self.token}.npu-migrate.tmp"

    def write(self, rel: str, data: bytes, mode: Optional[int] = None) -> None:
        """Replace ``root/rel`` by a file holding ``data`` (a link there is replaced, never followed)."""
        rel_dir, _, name = rel.rpartition("/")
        dir_fd = self._dir(rel_dir)
        stage_fd, tmp = (self._staging, f"{self.token}-{secrets.token_hex(8)}.tmp") if self._staging is not None \
            else (dir_fd, self.temp_name(name))
        fd = os.open(tmp, _NEW_FILE, 0o600, dir_fd=stage_fd)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fchmod(fd, _default_mode() if mode is None else mode)
                if self.durable:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=stage_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with suppress(OSError):
                os.unlink(tmp, dir_fd=stage_fd)
            raise
        if self.durable:
            with suppress(OSError):
                os.fsync(dir_fd)

    def link(self, rel: str, target: str) -> None:
        """Make ``root/rel`` a symbolic link to ``target`` (the link itself is written, never followed)."""
        rel_dir, _, name = rel.rpartition("/")
        dir_fd = self._dir(rel_dir)
        tmp = self.temp_name(name)
        os.symlink(target, tmp, dir_fd=dir_fd)
        try:
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise

    def remove(self, rel: str) -> None:
        """Delete ``root/rel`` (a file this tool wrote; used when an in-place run is reverted)."""
        rel_dir, _, name = rel.rpartition("/")
        with suppress(FileNotFoundError):
            os.unlink(name, dir_fd=self._dir(rel_dir))

    def read(self, rel: str) -> Optional[bytes]:
        """The bytes of ``root/rel`` when it is a regular file (not through a link), else None."""
        rel_dir, _, name = rel.rpartition("/")
        try:
            fd = os.open(name, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0), dir_fd=self._dir(rel_dir))
        except OSError:
            return None
        with os.fdopen(fd, "rb") as handle:
            return handle.read()
