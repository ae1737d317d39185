"""What the vendor's migration tools rewrite, patch or advise about: seen, rewritten, reported, silent (issue 27).

    python benchmarks/device_parity.py [DIR ...] [--no-fixtures] [--no-transformers] [--show N]

Independently of the rules, a scanner (Python's ``ast``, not libcst) finds the uses of every row of
``opmap/reference/vendor_migration_rows.txt`` in the fixture repos (``fixtures/demo``,
``fixtures/models``, ``fixtures/parity``, ``fixtures/real_code``), in transformers' trainer and
integration modules where pip installed them (``trainer*.py``, ``training_args*.py``,
``integrations/``) and in any DIR given. Each row's ``match`` says what a use looks like (the file's
header); the scanner implements those kinds from the vendor's own semantics (transfer_to_npu's
device arguments, msFmkTransplt's whole-string rewrites, the advice's conditions), sharing nothing
with the rules. ``migrate run`` then migrates the same files in memory (the advice rows with
``--select NPU4``), and each use is:

- rewritten / reported: a finding of a device-layer code (not NPU3xx) on its line (for strings and
  attributes: at its column), rewritten winning;
- native: none, and the op table has a ``native`` record for the row's API (no change is needed,
  and the record says why);
- silent: neither.

Prints per corpus and tool: uses seen, rewritten, reported, native, silent; then the silent uses;
first a self-check: the scanner must see the marked line of every snippet of
``fixtures/device_parity/snippets.yaml`` as a use of its row.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from npu_migrate.migrate.discovery import discover  # noqa: E402
from npu_migrate.migrate.runner import run  # noqa: E402
from npu_migrate.opmap import load_table  # noqa: E402
from npu_migrate.opmap.reference import VendorRow, vendor_rows  # noqa: E402

FIXTURE_REPOS = ("demo", "models", "parity", "real_code")
DEVICE_KWARGS = frozenset({"device", "device_type", "map_location", "device_id", "device_ids"})
CUDA = re.compile(r"cuda(:\d+)?")
BARE = {"torch.is_autocast_enabled": 0, "torch.set_autocast_enabled": 1}  # positionals when no device is named
VERDICTS = ("rewritten", "reported", "native", "silent")


@dataclass(frozen=True)
class Use:
    path: str
    line: int
    col: int
    row: VendorRow
    exact: bool  # judged at (line, col) rather than the line
    text: str


# -- the scanner ------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError, AttributeError):
        return False


def _cudaish(node: ast.AST, names: "Names") -> bool:
    """A "cuda"/"cuda:N" string, f"cuda:{i}", torch.device("cuda", ...), or a list/dict holding one."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return CUDA.fullmatch(node.value) is not None
    if isinstance(node, ast.JoinedStr):
        head = node.values[0] if node.values else None
        return isinstance(head, ast.Constant) and str(head.value).startswith("cuda")
    if isinstance(node, ast.Call) and names.qualified(node.func) == "torch.device":
        return bool(node.args) and _cudaish(node.args[0], names)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return any(_cudaish(e, names) for e in node.elts)
    if isinstance(node, ast.Dict):
        return any(_cudaish(e, names) for e in [*node.keys, *node.values] if e is not None)
    return False


def _device_args(call: ast.Call, names: "Names") -> bool:
    return any(_cudaish(a, names) for a in call.args) or any(
        k.arg in DEVICE_KWARGS and _cudaish(k.value, names) for k in call.keywords)


def _keyword(call: ast.Call, name: str) -> Optional[ast.AST]:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _literal(node: Optional[ast.AST], value) -> bool:
    return isinstance(node, ast.Constant) and node.value is value


class Names:
    """The file's imports: local name -> qualified name."""

    def __init__(self, tree: ast.Module):
        self.bound: Dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self.bound[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    self.bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def is_module(self, node: ast.AST) -> bool:
        """``node`` names an imported module or an object of one (``torch``, ``torch.nn.Module``), not a
        value whose methods the method rows mean (``dist.group.WORLD`` is a value)."""
        qualified = self.qualified(node)
        return qualified is not None and (is_module(qualified) or is_module(qualified.rpartition(".")[0]) and
                                          qualified.rpartition(".")[2][:1].isupper())

    def qualified(self, node: ast.AST) -> Optional[str]:
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.bound:
            return None
        return ".".join([self.bound[node.id], *reversed(parts)])


def _advice_applies(api: str, call: ast.Call) -> bool:
    """The vendor advice's condition (facts §(iii)) for a call of ``api``."""
    if api.startswith("torch.optim."):
        return not _literal(_keyword(call, "fused"), True)
    if api == "torch.utils.data.DataLoader":
        workers = _keyword(call, "num_workers")
        return not (_literal(_keyword(call, "pin_memory"), True) and workers is not None
                    and not (isinstance(workers, ast.Constant) and workers.value == 0))
    if api == "torch.nn.parallel.DistributedDataParallel":
        return _keyword(call, "bucket_cap_mb") is None
    if api == "torch.autograd.set_detect_anomaly":
        mode = call.args[0] if call.args else _keyword(call, "mode")
        return not _literal(mode, False)
    if api.endswith("set_compile_mode"):
        return _literal(_keyword(call, "jit_compile"), True)
    return True


def _copy_to_device(call: ast.Call, names: Names) -> bool:
    """x.to(<device>) / x.npu() / x.cuda() without non_blocking=True (the advice's condition)."""
    if _literal(_keyword(call, "non_blocking"), True):
        return False
    if call.func.attr in ("cuda", "npu"):
        return True
    target = call.args[0] if call.args else _keyword(call, "device")
    if isinstance(target, ast.Constant) and isinstance(target.value, str):
        return re.fullmatch(r"(cuda|npu|xpu|mps|hpu)(:\d+)?", target.value) is not None
    if isinstance(target, ast.Call):
        return names.qualified(target.func) == "torch.device"
    name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
    return bool(re.search(r"device|^dev$|_dev$", name.lower()))


class Scanner:
    """The uses of the vendor rows in one file."""

    def __init__(self, rows: Sequence[VendorRow]):
        self.rows = rows
        self.by_kind: Dict[str, List[VendorRow]] = defaultdict(list)
        for row in rows:
            self.by_kind[row.match.split(":")[0]].append(row)

    def uses(self, path: str, text: str) -> List[Use]:
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError):
            return []
        names, lines = Names(tree), text.splitlines()
        docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
        parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        found: List[Tuple[ast.AST, VendorRow, bool]] = []
        for node in ast.walk(tree):
            found.extend(self._node(node, names, parents, docstrings))
        device_profiling = any(row.match in ("profiler",) or row.api.endswith("ProfilerActivity.CUDA") for _, row, _ in found)
        out = []
        for node, row, exact in found:
            if row.match == "profiler-part" and not device_profiling:
                continue
            line = node.lineno
            out.append(Use(path, line, node.col_offset, row, exact, lines[line - 1].strip() if line <= len(lines) else ""))
        return out

    def _node(self, node, names: Names, parents, docstrings) -> Iterator[Tuple[ast.AST, VendorRow, bool]]:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield from self._import(node)
        elif isinstance(node, (ast.Name, ast.Attribute)) and not isinstance(parents.get(id(node)), ast.Attribute):
            yield from self._chain(node, names)
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and not names.is_module(node.value):
            for row in self.by_kind["attribute"]:
                if node.attr == row.api.rpartition(".")[2]:
                    yield node, row, True
        if isinstance(node, ast.Call):
            yield from self._call(node, names)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            for row in self.by_kind["string"]:
                if re.fullmatch(row.api, node.value):
                    yield node, row, True

    def _import(self, node) -> Iterator[Tuple[ast.AST, VendorRow, bool]]:
        """An import that binds a module a ``name`` row covers (``from torch import cuda``)."""
        if isinstance(node, ast.Import):
            bound = [alias.name for alias in node.names if alias.asname]
        else:
            bound = [f"{node.module}.{alias.name}" for alias in node.names] if node.module and not node.level else []
        for name in bound:
            for row in self._covering(name, ("name",)):
                if is_module(row.api) or name == row.api:
                    yield node, row, False

    def _covering(self, qualified: str, kinds) -> List[VendorRow]:
        """Per tool, the most specific row of these kinds that covers ``qualified``."""
        best: Dict[str, VendorRow] = {}
        for kind in kinds:
            for row in self.by_kind[kind]:
                if qualified == row.api or qualified.startswith(row.api + "."):
                    if row.tool not in best or len(row.api) > len(best[row.tool].api):
                        best[row.tool] = row
        return list(best.values())

    def _chain(self, node, names: Names) -> Iterator[Tuple[ast.AST, VendorRow, bool]]:
        qualified = names.qualified(node)
        if qualified is not None:
            for row in self._covering(qualified, ("name", "profiler-part")):
                yield node, row, False

    def _call(self, call: ast.Call, names: Names) -> Iterator[Tuple[ast.AST, VendorRow, bool]]:
        qualified = names.qualified(call.func)
        method = call.func.attr if isinstance(call.func, ast.Attribute) and not names.is_module(call.func.value) else None
        for row in self.rows:
            kind, _, keyword = row.match.partition(":")
            last = row.api.rpartition(".")[2]
            if qualified == row.api and not kind.startswith(("method", "advice-method")):
                hit = {"call-device": lambda: _device_args(call, names),
                       "call-backend": lambda: any(isinstance(a, ast.Constant) and isinstance(a.value, str)
                                                   and "nccl" in a.value.lower()
                                                   for a in [*call.args, *(k.value for k in call.keywords if k.arg == "backend")]),
                       "call-default": lambda: len(call.args) == BARE.get(row.api, -1) and not any(
                           k.arg in DEVICE_KWARGS for k in call.keywords),
                       "profiler": lambda: self._profiles_device(call, names),
                       "keyword": lambda: _keyword(call, keyword) is not None,
                       "advice": lambda: _advice_applies(row.api, call)}.get(kind)
                if hit is not None and hit():
                    yield call, row, False
            elif method is not None and method == last:
                if kind == "method" or (kind == "method-device" and _device_args(call, names)):
                    yield call, row, False
                elif kind == "advice-method" and (_copy_to_device(call, names) if last == "to" else True):
                    yield call, row, False
            elif method in ("cuda", "npu") and kind == "advice-method" and last == "to" and _copy_to_device(call, names):
                yield call, row, False

    @staticmethod
    def _profiles_device(call: ast.Call, names: Names) -> bool:
        activities = _keyword(call, "activities")
        if not isinstance(activities, (ast.List, ast.Tuple, ast.Set)):
            return True  # torch's default (CPU and CUDA), or computed at run time
        return any(not (isinstance(e, ast.Attribute) and e.attr == "CPU") for e in activities.elts)


# -- the verdicts -------------------------------------------------------------------------------------
def verdict(use: Use, findings: Dict[Tuple[str, int], List], table) -> str:
    here = [f for f in findings.get((use.path, use.line), ()) if not use.exact or f.col == use.col]
    advice = use.row.tool.endswith("advice")
    here = [f for f in here if f.code.startswith("NPU4") == advice and not f.code.startswith("NPU3")]
    actions = {f.action for f in here}
    if "rewritten" in actions:
        return "rewritten"
    if "reported" in actions:
        return "reported"
    record = table.exact(use.row.api)
    return "native" if record is not None and record.status == "native" and record.summary else "silent"


def findings_of(root: Path, files: Sequence[str], table, select=None) -> Dict[Tuple[str, int], List]:
    result = run(root, files, table, select=select, jobs=1, isolate=False)
    by_line: Dict[Tuple[str, int], List] = defaultdict(list)
    for finding in result.findings:
        by_line[(finding.path, finding.line)].append(finding)
    return by_line


def measure(name: str, root: Path, files: Sequence[str], scanner: Scanner, table) -> Tuple[Counter, List[Use]]:
    uses = [u for path in files for u in scanner.uses(path, (root / path).read_text(encoding="utf-8", errors="replace"))]
    default = findings_of(root, files, table)
    advised = findings_of(root, files, table, select=["NPU4"])
    counts: Counter = Counter()
    silent = []
    for use in uses:
        tool = use.row.tool
        v = verdict(use, advised if tool.endswith("advice") else default, table)
        counts[(tool, "seen")] += 1
        counts[(tool, v)] += 1
        if v == "silent":
            silent.append(use)
    return counts, silent


def self_check(scanner: Scanner) -> Tuple[int, List[str]]:
    """Every snippet's marked lines are seen as uses of its row."""
    snippets = yaml.safe_load((REPO / "fixtures" / "device_parity" / "snippets.yaml").read_text())
    missed = []
    for snippet in snippets:
        marked = {n for n, line in enumerate(snippet["source"].splitlines(), 1) if line.rstrip().endswith("# <-")}
        seen = {u.line for u in scanner.uses("snippet.py", snippet["source"]) if u.row.key == snippet["row"]}
        if not marked & seen:
            missed.append(snippet["row"])
    return len(snippets), missed


def corpora(args) -> List[Tuple[str, Path, List[str]]]:
    out = []
    if not args.no_fixtures:
        for repo in FIXTURE_REPOS:
            root = REPO / "fixtures" / repo
            out.append((f"fixtures/{repo}", root, discover(root).python))
    if not args.no_transformers:
        spec = importlib.util.find_spec("transformers")
        if spec is not None and spec.origin:
            root = Path(spec.origin).parent
            files = sorted(str(p.relative_to(root)) for pattern in ("trainer*.py", "training_args*.py", "integrations/**/*.py")
                           for p in root.glob(pattern))
            out.append(("transformers (trainer, args, integrations)", root, files))
    for directory in args.dirs:
        root = directory.resolve()
        out.append((root.name, root, discover(root).python))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="*", type=Path)
    parser.add_argument("--no-fixtures", action="store_true")
    parser.add_argument("--no-transformers", action="store_true")
    parser.add_argument("--show", type=int, default=30)
    args = parser.parse_args(argv)
    rows, table = vendor_rows(), load_table()
    scanner = Scanner(rows)
    total, missed = self_check(scanner)
    print(f"scanner self-check: {total - len(missed)}/{total} snippet sites seen as uses of their rows"
          + (f"; missed: {missed}" if missed else ""))
    print(f"\n{'corpus':<44} {'tool':<22} {'seen':>6} {'rewritten':>10} {'reported':>9} {'native':>7} {'silent':>7}")
    every: Counter = Counter()
    all_silent: List[Use] = []
    for name, root, files in corpora(args):
        counts, silent = measure(name, root, files, scanner, table)
        for tool in sorted({t for t, _ in counts}):
            print(f"{name:<44} {tool:<22} " + " ".join(f"{counts[(tool, k)]:>{w}}" for k, w in
                                                       (("seen", 6), ("rewritten", 10), ("reported", 9), ("native", 7), ("silent", 7))))
        every.update(counts)
        all_silent.extend(silent)
    tools = sorted({t for t, _ in every})
    print(f"{'all':<44} {'all':<22} " + " ".join(f"{sum(every[(t, k)] for t in tools):>{w}}" for k, w in
                                              (("seen", 6), ("rewritten", 10), ("reported", 9), ("native", 7), ("silent", 7))))
    for use in all_silent[:args.show]:
        print(f"  silent: {use.path}:{use.line}: [{use.row.api} {use.row.match}] {use.text[:90]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
