"""What a run produces per site and per file: plain, picklable data (workers send it back)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import List, Optional

from ..opmap import Fallback

ACTIONS = ("rewritten", "reported", "suppressed")  # suppressed: kept as is by ``# npu-migrate: ignore[CODE]``
FILE_STATUSES = ("changed", "unchanged", "skipped", "error")

# How far a rewrite can be trusted without a parity run: device rewrites (NPU2xx) move the same
# computation to the NPU; fused rewrites (NPU3xx) swap in a kernel with its own rounding.
SAFE, NUMERICS_CHANGING = "safe", "numerics-changing"
SAFETIES = (SAFE, NUMERICS_CHANGING)


SAFETY_BY_FAMILY = {"NPU2": SAFE, "NPU3": NUMERICS_CHANGING}


def fix_safety(code: str, action: str) -> Optional[str]:
    """The safety of a finding's fix: None for a site that was not rewritten."""
    return SAFETY_BY_FAMILY.get(code[:4]) if action == "rewritten" else None


@dataclass
class Finding:
    code: str
    message: str
    action: str  # "rewritten", "reported" or "suppressed" (kept as is by a `# npu-migrate: ignore` comment)
    api: Optional[str] = None  # the torch qualified name at the site
    target: Optional[str] = None  # the NPU API used, when rewritten
    fallback: Optional[Fallback] = None  # for every reported site
    path: str = ""
    line: int = 0  # 1-based; in a notebook, the line in its cell
    col: int = 0  # 0-based as libcst counts; every output shows it 1-based (report.json's ``col`` + 1)
    cell: Optional[int] = None  # a notebook's code cell, 1-based among all its cells (None in a .py file)

    @property
    def safety(self) -> Optional[str]:
        """``"safe"``, ``"numerics-changing"`` or None (not rewritten): derived, so it follows the action."""
        return fix_safety(self.code, self.action)

    def to_json(self) -> dict:
        data = {k: v for k, v in asdict(self).items() if k != "fallback"}
        data["fallback"] = asdict(self.fallback) if self.fallback else None
        data["safety"] = self.safety
        return data


PYTHON = "python"  # the kind of a Python file; other kinds are migrate.files' (requirements, dockerfile, ...)
PACKAGE_STATUSES = ("compatible", "replace", "unsupported", "unlisted")  # unlisted: no package-table record


@dataclass
class Requirement:
    """A package a dependency file declares, as the compatibility matrix lists it."""

    name: str  # the normalised distribution (or conda package) name
    spec: str  # the declaration as written, e.g. "torch==2.4.0+cu121"
    line: int
    status: str  # one of PACKAGE_STATUSES, from the package table
    group: str = ""  # where in the file: "dependencies", "optional-dependencies.dev", "pip install", ...
    replacement: Optional[str] = None

    def to_json(self) -> dict:
        return asdict(self)


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
    # the file's part of changes.patch, made in the worker (None for a cached result: made with the patch)
    diff: Optional[str] = None
    kind: str = PYTHON  # "python", or the migrate.files kind of a dependency or launcher file
    requirements: List[Requirement] = field(default_factory=list)  # the packages a dependency file declares


def error_result(path: str, code: str, message: str, line: int = 0, col: int = 0) -> FileResult:
    """A file that could not be processed: one tool finding, the original kept."""
    where = f"{path}:{line}:{col + 1}" if line else path  # 1-based, as every output shows it
    finding = Finding(code, message, "reported", path=path, line=line, col=col)
    return FileResult(path, "error", [finding], error=f"{where}: {code} {message}")
