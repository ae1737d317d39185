"""What every declared package becomes, whatever file declares it (``Declared`` from
``migrate.files.declared``), decided by the op table's package table (``opmap/packages.yaml``):

- a package whose record is ``replace`` or ``unsupported``, or a CUDA build (``+cu121``, a conda
  build string naming CUDA), is reported with the record's code and plan;
- a ``compatible`` package pinned outside its record's ``version`` rule is reported (NPU136);
- where the repository's (migrated) code imports torch_npu, each exact torch pin gains the matching
  ``torch-npu`` requirement (NPU220) from the reference table ``opmap/reference/torch_npu_releases.yaml``;
  a torch declaration that cannot (no exact pin, a release without torch-npu, hash-checking mode,
  nowhere to add it) is reported with the line to add (NPU132).

Every declaration becomes a row of the compatibility matrix (``Scan.requirements``). Package
indexes and conda channels are checked against the table's ``indexes`` (``check_index``).
"""

from __future__ import annotations

import re
from typing import List, Optional

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from npu_migrate.migrate.files.base import Scan
from npu_migrate.migrate.files.declared import CONDA, PIP, Declared, parse
from npu_migrate.migrate.findings import Requirement
from npu_migrate.opmap import Fallback
from npu_migrate.opmap.reference import TorchNpuRelease, torch_npu_releases

TORCH_NPU_REQUIREMENT, TORCH_NPU_UNMATCHED, OUTSIDE_RULE = "NPU220", "NPU132", "NPU136"
BUILD_GROUPS = ("build-system",)  # building an extension needs torch, not torch-npu
RELEASES_FILE = "opmap/reference/torch_npu_releases.yaml"


def check_packages(scan: Scan, declarations: List[Declared]) -> None:
    """Report every declaration the package table flags, list them all, then add torch-npu."""
    for item in declarations:
        _check(scan, item)
    _torch_npu(scan, declarations)


def check_index(scan: Scan, url: str, at: int) -> None:
    record = scan.table.index(url)
    if record is not None:
        instead = f"; use {record.replacement}" if record.replacement else ""
        scan.report(at, record.code, f"package source {url}: {record.reason}{instead}",
                    record.fallback, api=url)


# name[cu12], name[cu121onlytorch240], name[flash-attn-cu130torch211], name[cuda12]: a CUDA build
CUDA_EXTRA = re.compile(r"(^|[-_.])(cu\d{2,3}|cuda)", re.I)


def check_group(scan: Scan, name: str, at: int) -> None:
    """An optional dependency group named after a CUDA build (``cu121 = [...]``): reported, its
    packages are reported one by one."""
    if CUDA_EXTRA.search(name):
        record = scan.table.package("*", name.lower())
        if record is not None and record.code:
            scan.report(at, record.code, f"optional dependency group {name!r} is named after a CUDA build: its "
                                         "packages are the CUDA builds", Fallback(
                                             "replace-library", "Leave this group out of an NPU install; the "
                                             "packages it lists are reported one by one."), api=name)


def _check(scan: Scan, item: Declared) -> None:
    if item.url:
        check_index(scan, item.url, item.at)
    cuda_extras = [extra for extra in item.extras if CUDA_EXTRA.search(extra)]
    record = scan.table.package(item.name, item.local or (cuda_extras[0] if cuda_extras else None))
    status = record.status if record is not None else "unlisted"
    if record is not None and record.status != "compatible":
        build = f" (build {item.local or cuda_extras[0]})" if record.local and (item.local or cuda_extras) else ""
        instead = f"; replacement: {record.replacement}" if record.replacement else ""
        scan.report(item.at, record.code, f"{item.spec}{build}: {record.reason}{instead}", record.fallback,
                    api=item.name)
    elif record is not None and record.version and item.pinned and not _admits(record.version, item.pinned):
        scan.report(item.at, record.code, f"{item.spec}: {item.name} {item.pinned} is outside the releases that "
                                          f"work on an NPU ({record.version}): {record.reason}", record.fallback,
                    api=item.name)
    elif record is not None and record.version and item.pinned is None and _below(record.version, item.spec):
        scan.report(item.at, record.code, f"{item.spec}: every release it allows predates the releases that work "
                                          f"on an NPU ({record.version}): {record.reason}", record.fallback,
                    api=item.name)
    scan.requirements.append(Requirement(item.name, item.spec, scan.line(item.at), status, item.group,
                                         record.replacement if record is not None else None))


def _below(rule: str, spec: str) -> bool:
    """Whether a PEP 508 declaration's upper bound (``<0.9``, ``<=0.9.2``, ``~=0.8.0``) keeps it under the
    first release the rule admits (the rule's ``>=``/``>`` bound)."""
    requirement = parse(spec)
    try:
        floors = [Version(s.version) for s in SpecifierSet(rule) if s.operator in (">=", ">")]
        if requirement is None or not floors:
            return False
        first = max(floors)
        for s in requirement.specifier:
            bound = Version(s.version.rstrip(".*")) if s.operator in ("<", "<=", "~=") else None
            if s.operator == "~=":  # ~=X.Y.Z means <X.(Y+1): under ``first`` when X.(Y+1) <= first
                release = bound.release[:-1] or bound.release
                bound = Version(".".join(map(str, (*release[:-1], release[-1] + 1))))
            if bound is not None and (bound < first or bound == first and s.operator in ("<", "~=")):
                return True
    except InvalidVersion:
        return False
    return False


def _admits(rule: str, version: str) -> bool:
    try:
        return SpecifierSet(rule).contains(Version(version), prereleases=True)
    except InvalidVersion:
        return True  # not a PEP 440 version: nothing can be said


def _is_torch(item: Declared) -> bool:
    return (item.name == "torch" and item.ecosystem == PIP or item.name == "pytorch" and item.ecosystem == CONDA) \
        and item.group not in BUILD_GROUPS


def _suggestion(version: Optional[str]) -> str:
    """The nearest releases that have a torch-npu, for a plan."""
    releases = torch_npu_releases()
    same_minor = [r for r in releases.values() if version and r.torch.split(".")[:2] == version.split(".")[:2]]
    picks = same_minor or [max(releases.values(), key=lambda r: Version(r.torch))]
    return ", ".join(f"torch=={r.torch} with torch-npu=={r.torch_npu}" for r in picks)


def _line(release: TorchNpuRelease) -> str:
    cann = release.cann.get(release.torch_npu)
    paired = f", which pairs with CANN {cann}" if cann else ""
    others = f"; other CANN versions need one of {', '.join(release.others)}" if release.others else ""
    return f"the newest torch-npu for torch {release.torch}{paired}{others} ({RELEASES_FILE})"


def _unmatched(scan: Scan, item: Declared, why: str, add: str) -> None:
    scan.report(item.at, TORCH_NPU_UNMATCHED, f"{item.spec}: the migrated code imports torch_npu, but {why}",
                Fallback("manual", add), api="torch")


def _torch_npu(scan: Scan, declarations: List[Declared]) -> None:
    if not scan.facts.imports_torch_npu:
        return
    torches = [d for d in declarations if _is_torch(d)]
    if any(d.ecosystem == PIP for d in torches):  # a conda environment pinning both: its pip torch gets torch-npu
        torches = [d for d in torches if d.ecosystem == PIP]
    present = [d for d in declarations if d.name == "torch-npu"]
    releases = torch_npu_releases()
    if present:
        pinned = {d.pinned for d in torches if d.pinned}
        for npu in present:
            line = next((r for r in releases.values() if npu.pinned in (r.torch_npu, *r.others)), None)
            if npu.pinned and line is not None and pinned and line.torch not in pinned:
                _unmatched(scan, npu, f"torch-npu {npu.pinned} is built for torch {line.torch}, not for the pinned "
                                      f"torch {', '.join(sorted(pinned))}",
                           f"Pin the torch-npu release built for your torch: {_suggestion(sorted(pinned)[0])}.")
        return
    for item in torches:
        release = releases.get(item.pinned) if item.pinned else None
        if item.pinned is None:
            _unmatched(scan, item, "torch is not pinned to one release, so no torch-npu release can be chosen",
                       f"Pin torch to a release that has a torch-npu release and add that torch-npu beside it, e.g. "
                       f"{_suggestion(None)} ({RELEASES_FILE} lists every pair).")
        elif release is None:
            _unmatched(scan, item, f"torch {item.pinned} has no torch-npu release on PyPI",
                       f"Move to a torch release that has one and add it beside torch: {_suggestion(item.pinned)} "
                       f"({RELEASES_FILE} lists every pair).")
        elif item.sibling is None or item.hashed:
            why = "pip's hash-checking mode needs a hash for it" if item.hashed else \
                "npu-migrate cannot add it beside this declaration (a one-line list, or no pip section)"
            _unmatched(scan, item, f"torch-npu=={release.torch_npu} ({_line(release)}) is not declared and {why}",
                       f"Add torch-npu=={release.torch_npu} beside torch=={release.torch}"
                       f"{' with its --hash' if item.hashed else ''}.")
        else:
            added = f"torch-npu=={release.torch_npu}" + (f"; {item.marker}" if item.marker else "")
            scan.rewrite(item.at, TORCH_NPU_REQUIREMENT, f"{item.spec}: adds {added}, {_line(release)}",
                         [item.sibling(added)], target=added, api="torch")
