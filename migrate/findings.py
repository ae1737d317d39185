"""What a run produces per site and per file: plain, picklable data (workers send it back)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import List, Optional

from npu_migrate.opmap import Fallback

ACTIONS = ("rewritten", "reported")
FILE_STATUSES = ("changed", "unchanged", "skipped", "error")


@dataclass
class Finding:
    code: str
    message: str
    action: str  # "rewritten" or "reported"
    api: Optional[str] = None  # the torch qualified name at the site
    target: Optional[str] = None  # the NPU API used, when rewritten
    fallback: Optional[Fallback] = None  # for every reported site
    path: str = ""
    line: int = 0
    col: int = 0

    def to_json(self) -> dict:
        data = {k: v for k, v in asdict(self).items() if k != "fallback"}
        data["fallback"] = asdict(self.fallback) if self.fallback else None
        return data


@dataclass
class FileResult:
    path: str  # relative to the migrated root, with forward slashes
    status: str  # one of FILE_STATUSES
    findings: List[Finding] = field(default_factory=list)
    error: Optional[str] = None
    original: Optional[str] = None  # source text, kept only when the file changed
    migrated: Optional[str] = None
    helpers: List[str] = field(default_factory=list)  # helper modules the migrated file imports
    digest: Optional[str] = None  # sha256 of the bytes that were migrated (in-place writes check it)
    diff: Optional[str] = None  # the file's part of changes.patch, made in the worker (and cached)
