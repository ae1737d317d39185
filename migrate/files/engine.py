"""One dependency or launcher file in, one ``FileResult`` out (the non-Python twin of
``migrate.engine``): decode, let its kind scan it, keep the sites whose codes are selected, keep as
they are the sites on a line with ``# npu-migrate: ignore[CODE]`` (action ``suppressed``), leave
out a site whose edits overlap another's (it becomes an NPU006 finding), apply the edits in one
pass, check that every rewritten site's text is in the output and that the output is still a
valid file of its kind. Nothing here raises for a bad file: it becomes an error result.
"""

from __future__ import annotations

import bisect
from typing import Callable, List, Optional

from npu_migrate.migrate import diagnostics
from npu_migrate.migrate.engine import NOT_APPLIED_PLAN, error_result
from npu_migrate.migrate.files.base import Facts, FileKind, FileSyntaxError, Scan, TextEdit, TextSite
from npu_migrate.migrate.findings import FileResult, Finding
from npu_migrate.migrate.suppressions import is_suppressed, suppressed_lines
from npu_migrate.opmap import OpTable


def _not_applied(site: TextSite, why: str) -> None:
    old = site.finding
    site.finding = Finding(diagnostics.NOT_APPLIED, f"{old.code} rewrite not applied: {why} ({old.message})",
                           "reported", api=old.api, fallback=NOT_APPLIED_PLAN, path=old.path, line=old.line,
                           col=old.col)
    site.edits = ()


def _clashes(edit: TextEdit, taken: List[TextEdit], starts: List[int]) -> bool:
    """Whether ``edit`` overlaps one of ``taken`` (sorted by start; ``starts`` their starts)."""
    at = bisect.bisect_left(starts, edit.start)
    for other in taken[max(0, at - 1):at + 2]:  # disjoint and sorted: only the neighbours can overlap
        if edit.start < other.end and other.start < edit.end or edit.start == other.start \
                and (edit.start == edit.end or other.start == other.end):
            return True
    return False


def _drop_overlaps(sites: List[TextSite]) -> None:
    """Sites in source order; a site whose edit overlaps an earlier site's is not applied (an edit
    equal to one already taken is shared, e.g. two findings about one rename)."""
    taken: List[TextEdit] = []  # sorted by start, pairwise disjoint
    starts: List[int] = []
    seen = set()
    for site in sites:
        fresh = [e for e in site.edits if e not in seen]
        if any(_clashes(e, taken, starts) for e in fresh):
            _not_applied(site, "it overlaps another rewrite in this file")
            continue
        for edit in fresh:
            at = bisect.bisect_left(starts, edit.start)
            taken.insert(at, edit)
            starts.insert(at, edit.start)
            seen.add(edit)


def apply_edits(text: str, edits: List[TextEdit]) -> str:
    out, at = [], 0
    for edit in sorted(set(edits), key=lambda e: (e.start, e.end)):
        out.append(text[at:edit.start])
        out.append(edit.new)
        at = edit.end
    out.append(text[at:])
    return "".join(out)


def _verify(text: str, migrated: str, sites: List[TextSite]) -> None:
    """Every rewritten site's new text is in the output where its edit put it."""
    edits = sorted({e for s in sites for e in s.edits}, key=lambda e: (e.start, e.end))
    shift, placed = 0, {}
    for edit in edits:
        placed[edit] = edit.start + shift
        shift += len(edit.new) - (edit.end - edit.start)
    for site in sites:
        if any(migrated[placed[e]:placed[e] + len(e.new)] != e.new for e in site.edits):
            _not_applied(site, "its edit did not reach the output (an internal error of npu-migrate)")


def migrate_file(path: str, data: bytes, kind: FileKind, table: OpTable, facts: Facts = Facts(),
                 enabled: Callable[[str], bool] = lambda code: True) -> FileResult:
    """The file's result; never raises for a bad file."""
    try:
        result = _migrate(path, data, kind, table, facts, enabled)
    except FileSyntaxError as exc:
        result = error_result(path, diagnostics.DECLARATION_INVALID, f"{exc.message}; not migrated", exc.line)
    except RecursionError:
        result = error_result(path, diagnostics.TOO_DEEP, "nesting too deep to migrate; not migrated")
    except MemoryError:
        result = error_result(path, diagnostics.TOO_DEEP, "ran out of memory while migrating; not migrated")
    except Exception as exc:
        result = error_result(path, diagnostics.RULE_CRASH, f"the {kind.name} scan crashed: {type(exc).__name__}: {exc}")
    result.kind = kind.name
    return result


def _result(path: str, status: str, kind: FileKind, scan: Scan, sites: List[TextSite], **extra) -> FileResult:
    return FileResult(path, status, [s.finding for s in sites], kind=kind.name, requirements=scan.requirements,
                      **extra)


def _migrate(path: str, data: bytes, kind: FileKind, table: OpTable, facts: Facts,
             enabled: Callable[[str], bool]) -> FileResult:
    if not kind.declares_packages and not any(t in data for t in kind.triggers):
        return FileResult(path, "skipped", kind=kind.name)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if kind.maybe_data:
            return FileResult(path, "skipped", kind=kind.name)
        return error_result(path, diagnostics.NOT_UTF8, f"not UTF-8 text (byte {exc.start}: {exc.reason})")
    scan = Scan(path, text, table, facts)
    kind.scan(scan)
    sites = [s for s in scan.sites if enabled(s.finding.code)]
    for site in sites:
        site.finding.path = path
        site.finding.line, site.finding.col = scan.position(site.at)
    sites.sort(key=lambda s: (s.finding.line, s.finding.col, s.finding.code))
    kept_as_is = suppressed_lines(text)
    for site in sites:
        if is_suppressed(kept_as_is, site.finding.line, site.finding.code):
            site.finding.action, site.edits = "suppressed", ()
    _drop_overlaps(sites)
    rewriting = [s for s in sites if s.edits]
    if not rewriting:
        return _result(path, "unchanged", kind, scan, sites)
    migrated = apply_edits(text, [e for s in rewriting for e in s.edits])
    _verify(text, migrated, rewriting)
    if not all(s.edits for s in rewriting):  # a site was downgraded: apply the others only
        migrated = apply_edits(text, [e for s in rewriting for e in s.edits])
    if migrated == text:
        return _result(path, "unchanged", kind, scan, sites)
    problem: Optional[str] = kind.problem(migrated, path)
    if problem:
        return error_result(path, diagnostics.OUTPUT_INVALID,
                            f"the rewritten file would not be a valid {kind.name} file ({problem}); left unchanged")
    return _result(path, "changed", kind, scan, sites, original=text, migrated=migrated)
