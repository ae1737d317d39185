"""The parity spec: YAML loading and validation, every problem reported as ``file:line: problem``.

The file is read by the op table's strict loader (``opmap.yaml_source``: no tags, no duplicate
keys, bounded nesting); validation walks the node tree (not the loaded values) so each problem
carries the line of the node it is about, and collects every problem before giving up.
"""

from __future__ import annotations

import math
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
import yaml

from .changes import CHANGES
from .criteria import KEYS as CRITERIA_KEYS, supported_dtypes
from .precision import AMP_DTYPES, amp_label
from .training import DEFAULT_LR, DEFAULT_OPTIMIZERS, DEFAULT_STEPS, LOSSES, OPTIMIZERS
from ...opmap.yaml_source import SchemaError, compose, line_of, number_problem

CASE_KEYS = ("name", "factory", "kwargs", "inputs", "dtypes", "amp", "weights", "train", "changes", "output",
             "tolerance")
TRAIN_KEYS = ("optimizers", "steps", "lr", "loss")
MAX_STEPS = 100
TENSOR_KEYS = ("shape", "dtype", "low", "high")
TREE_KEYS = ("original", "migrated")  # optional top-level keys: the trees, relative to the spec
TODO_MARK = "TODO"
PROCESS_KEYS = ("timeout",)  # how a case's runs are run (parity.run): seconds one run may take
MAX_INPUT_ELEMENTS = 1 << 26  # a declared input's size cap: 64 Mi elements (256 MiB in float32)
_REF = re.compile(r"^(?P<target>[^:]+):(?P<attr>[A-Za-z_][\w.]*)$")
_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


class SpecError(Exception):
    """An invalid spec; ``problems`` are ``file:line: problem`` strings."""

    def __init__(self, problems: List[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Ref:
    """``file.py:callable`` (a path inside the tree under test, else beside the spec; see
    ``parity.resolve``) or ``package.module:callable`` (imported with the tree first on sys.path)."""

    target: str
    attr: str

    @property
    def is_file(self) -> bool:
        return self.target.endswith(".py")

    def __str__(self) -> str:
        return f"{self.target}:{self.attr}"


@dataclass(frozen=True)
class TensorSpec:
    """A declarative input: random values of ``shape``; dtype "float" means the case dtype."""

    shape: Tuple[int, ...]
    dtype: str = "float"
    low: Optional[float] = None
    high: Optional[float] = None


@dataclass(frozen=True)
class Training:
    """The training step (``train: true`` or a mapping of these keys): ``steps`` steps of each optimizer
    in ``optimizers`` (each from the case's weights) on the ``loss`` (``parity.training``)."""

    optimizers: Tuple[str, ...] = DEFAULT_OPTIMIZERS
    steps: int = DEFAULT_STEPS
    lr: float = DEFAULT_LR
    loss: str = "projection"


@dataclass
class Case:
    name: str
    factory: Ref
    inputs: Union[Ref, Dict[str, TensorSpec]]
    kwargs: Dict[str, Any] = field(default_factory=dict)
    dtypes: List[str] = field(default_factory=lambda: ["float32"])  # run labels (parity.precision)
    weights: Optional[Path] = None  # a checkpoint file or directory, loaded into the original
    train: Optional[Training] = None  # None: no training step
    changes: Tuple[str, ...] = ()  # parity.changes names, applied one by one between forward passes
    output: Optional[Union[str, int]] = None
    tolerance: Dict[str, Dict[str, Any]] = field(default_factory=dict)  # dtype -> overrides + reason
    line: int = 0
    timeout: Optional[float] = None  # seconds one run of the case may take (None: --timeout or the default)


@dataclass
class Spec:
    path: Path
    cases: List[Case]
    original: Optional[Path] = None  # the trees, when the spec names them (relative to its directory)
    migrated: Optional[Path] = None

    @property
    def directory(self) -> Path:
        return self.path.parent


def load_spec(path: Path) -> Spec:
    """Read and validate ``path``; raises ``SpecError`` listing every problem found."""
    path = Path(path)
    try:
        root = compose(path)
    except SchemaError as error:
        raise SpecError([str(error)]) from None
    todos = left_todos(path, root)
    if todos:
        raise SpecError(todos)
    checker = _Checker(path)
    cases = checker.spec(root)
    if checker.problems:
        raise SpecError(checker.problems)
    return Spec(path=path, cases=cases, **checker.trees)


def left_todos(path: Path, root: Optional[yaml.Node]) -> List[str]:
    """``file:line: TODO ...`` for every value still a ``TODO`` (as ``migrate parity init`` leaves
    what it cannot infer): the spec is refused with those messages before anything else."""
    found: List[Tuple[int, str]] = []
    todo = [root] if root is not None else []
    while todo:
        node = todo.pop()
        if isinstance(node, yaml.ScalarNode) and isinstance(node.value, str) and node.value.startswith(TODO_MARK):
            found.append((line_of(node), f"{path}:{line_of(node)}: {node.value}"))
        elif isinstance(node, yaml.SequenceNode):
            todo.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            todo.extend(value for _, value in node.value)
    return [problem for _, problem in sorted(found)]


class _Checker:
    def __init__(self, path: Path):
        self.path = path
        self.problems: List[str] = []
        self.trees: Dict[str, Path] = {}
        self._constructor = yaml.constructor.SafeConstructor()

    # -- helpers -----------------------------------------------------------------------------
    def error(self, node: yaml.Node, problem: str) -> None:
        self.problems.append(f"{self.path}:{line_of(node)}: {problem}")

    def value(self, node: yaml.Node) -> Any:
        return self._constructor.construct_object(node, deep=True)

    def mapping(self, node: yaml.Node, what: str, allowed: Tuple[str, ...]) -> Optional[Dict[str, yaml.Node]]:
        """The mapping's key -> value node, after reporting unknown and duplicate keys."""
        if not isinstance(node, yaml.MappingNode):
            self.error(node, f"{what} must be a mapping")
            return None
        items: Dict[str, yaml.Node] = {}
        for key_node, value_node in node.value:  # compose() refused repeated keys
            key = self.value(key_node)
            if allowed and key not in allowed:
                self.error(key_node, f"unknown key {key!r} in {what} (allowed: {', '.join(allowed)})")
            else:
                items[key] = value_node
        return items

    def number(self, node: yaml.Node, what: str) -> Optional[float]:
        value = self.value(node)
        problem = number_problem(value)
        if problem:
            self.error(node, f"{what} {problem}")
            return None
        return float(value)

    def ref(self, node: yaml.Node, what: str) -> Optional[Ref]:
        value = self.value(node)
        match = _REF.match(value) if isinstance(value, str) else None
        if not match:
            self.error(node, f"{what} must be 'file.py:callable' or 'package.module:callable', got {value!r}")
            return None
        ref = Ref(match["target"], match["attr"])
        if ref.is_file:
            if Path(ref.target).is_absolute():
                self.error(node, f"{what} file must be relative (to the tree under test or the spec), got {ref.target!r}")
                return None
            normal = posixpath.normpath(ref.target.replace("\\", "/"))
            if normal == ".." or normal.startswith("../"):
                self.error(node, f"{what} file {ref.target!r} must lie inside the tree under test or beside the spec, "
                                 "not above them ('..' leaves both)")
                return None
            ref = Ref(normal, ref.attr)
        elif not _MODULE.match(ref.target):
            self.error(node, f"{what}: {ref.target!r} is neither a .py file nor a dotted module name")
        return ref

    # -- the schema --------------------------------------------------------------------------
    def spec(self, root: Optional[yaml.Node]) -> List[Case]:
        if root is None:
            self.problems.append(f"{self.path}:1: the spec is empty (expected a 'cases' list)")
            return []
        top = self.mapping(root, "the spec", ("cases",) + TREE_KEYS)
        if top is None:
            return []
        for key in TREE_KEYS:
            if key in top:
                value = self.value(top[key])
                if not isinstance(value, str) or not value.strip():
                    self.error(top[key], f"{key} must be the path of the {key} tree (relative to the spec)")
                else:
                    self.trees[key] = (self.path.parent / value).resolve()
        if "cases" not in top:
            self.error(root, "missing key 'cases'")
            return []
        cases_node = top["cases"]
        if not isinstance(cases_node, yaml.SequenceNode) or not cases_node.value:
            self.error(cases_node, "'cases' must be a non-empty list")
            return []
        cases, seen = [], set()
        for node in cases_node.value:
            timeout = self.timeout(node) if isinstance(node, yaml.MappingNode) else None
            case = self.case(node)
            if case is None:
                continue
            case.timeout = timeout
            if case.name in seen:
                self.error(node, f"duplicate case name {case.name!r}")
            seen.add(case.name)
            cases.append(case)
        return cases

    def case(self, node: yaml.Node) -> Optional[Case]:
        items = self.mapping(node, "a case", CASE_KEYS + PROCESS_KEYS)
        if items is None:
            return None
        for key in ("name", "factory", "inputs"):
            if key not in items:
                self.error(node, f"case is missing required key {key!r}")
        if any(key not in items for key in ("name", "factory", "inputs")):
            return None
        name = self.value(items["name"])
        if not isinstance(name, str) or not name.strip():
            self.error(items["name"], "case name must be a non-empty string")
        factory = self.ref(items["factory"], "factory")
        inputs = self.inputs(items["inputs"])
        kwargs = {}
        if "kwargs" in items:
            kwargs = self.value(items["kwargs"])
            if not isinstance(kwargs, dict):
                self.error(items["kwargs"], "kwargs must be a mapping")
        dtypes = self.dtypes(items["dtypes"]) if "dtypes" in items else ["float32"]
        if "amp" in items:
            dtypes = self.amp(items["amp"], "dtypes" in items)
        weights = self.weights(items["weights"]) if "weights" in items else None
        train = self.training(items["train"]) if "train" in items else None
        changes = self.changes(items["changes"]) if "changes" in items else ()
        output = None
        if "output" in items:
            output = self.value(items["output"])
            if not isinstance(output, (str, int)) or isinstance(output, bool):
                self.error(items["output"], "output must be an attribute or key name, or an index")
        tolerance = self.tolerance(items["tolerance"], dtypes) if "tolerance" in items else {}
        if self.problems:
            return None
        return Case(name, factory, inputs, kwargs, dtypes, weights, train, changes, output, tolerance, line_of(node))

    def training(self, node: yaml.Node) -> Optional[Training]:
        if isinstance(node, yaml.ScalarNode):
            value = self.value(node)
            if not isinstance(value, bool):
                self.error(node, f"train must be true, false or a mapping of {', '.join(TRAIN_KEYS)}, got {value!r}")
            return Training() if value is True else None
        items = self.mapping(node, "train", TRAIN_KEYS)
        if items is None:
            return None
        fields: Dict[str, Any] = {}
        if "optimizers" in items:
            listed, names = items["optimizers"], self.value(items["optimizers"])
            if not isinstance(listed, yaml.SequenceNode) or not names:
                self.error(listed, f"optimizers must be a non-empty list of {', '.join(OPTIMIZERS)}")
            else:
                for item_node, name in zip(listed.value, names):
                    if not isinstance(name, str) or name not in OPTIMIZERS:
                        self.error(item_node, f"unknown optimizer {name!r} (known: {', '.join(OPTIMIZERS)})")
                if len(set(map(str, names))) != len(names):
                    self.error(listed, "an optimizer is listed twice")
                fields["optimizers"] = tuple(names)
        if "steps" in items:
            steps = self.value(items["steps"])
            if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_STEPS:
                self.error(items["steps"], f"steps must be an integer from 1 to {MAX_STEPS}, got {steps!r}")
            fields["steps"] = steps
        if "lr" in items:
            lr = self.number(items["lr"], "lr")
            if lr is not None and lr <= 0:
                self.error(items["lr"], f"lr must be positive, got {lr}")
            fields["lr"] = lr
        if "loss" in items:
            loss = self.value(items["loss"])
            if not isinstance(loss, str) or loss not in LOSSES:
                self.error(items["loss"], f"loss must be one of {', '.join(LOSSES)}, got {loss!r}")
            fields["loss"] = loss
        return Training(**fields)

    def changes(self, node: yaml.Node) -> Tuple[str, ...]:
        value = self.value(node)
        if value == "all":
            return tuple(CHANGES)
        if not isinstance(value, list) or not value:
            self.error(node, f"changes must be 'all' or a non-empty list of {', '.join(CHANGES)}")
            return ()
        for item_node, name in zip(node.value, value):
            if not isinstance(name, str) or name not in CHANGES:
                self.error(item_node, f"unknown change {name!r} (known: {', '.join(CHANGES)})")
        if len(set(map(str, value))) != len(value):
            self.error(node, "a change is listed twice")
        return tuple(value)

    def timeout(self, case: yaml.Node) -> Optional[float]:
        """The case's ``timeout:`` in seconds (a positive number), or None when it has none."""
        node = next((v for k, v in case.value if self.value(k) == "timeout"), None)
        if node is None:
            return None
        seconds = self.number(node, "timeout")
        if seconds is not None and seconds <= 0:
            self.error(node, f"timeout must be a positive number of seconds, got {self.value(node)!r}")
            return None
        return seconds

    def dtypes(self, node: yaml.Node) -> List[str]:
        values = self.value(node)
        known = supported_dtypes()
        if not isinstance(values, list) or not values:
            self.error(node, f"dtypes must be a non-empty list of {', '.join(known)}")
            return []
        for item_node, value in zip(node.value, values):
            if value not in known:
                self.error(item_node, f"unsupported dtype {value!r} (supported: {', '.join(known)})")
        return values

    def amp(self, node: yaml.Node, has_dtypes: bool) -> List[str]:
        value = self.value(node)
        if value not in AMP_DTYPES:
            self.error(node, f"amp must be one of {', '.join(AMP_DTYPES)}, got {value!r}")
            return []
        if has_dtypes:
            self.error(node, "a case with 'amp' keeps float32 weights under autocast: drop its 'dtypes' "
                             "(put plain dtypes in a case of their own)")
        return [amp_label(value)]

    def weights(self, node: yaml.Node) -> Optional[Path]:
        value = self.value(node)
        if not isinstance(value, str) or not value.strip():
            self.error(node, "weights must be the path of a checkpoint file or directory")
            return None
        path = (self.path.parent / value).resolve()
        if not path.exists():
            self.error(node, f"weights {value!r} not found ({path}): a local file or directory is needed, "
                             "nothing is downloaded")
            return None
        return path

    def inputs(self, node: yaml.Node):
        if isinstance(node, yaml.ScalarNode):
            return self.ref(node, "inputs")
        items = self.mapping(node, "inputs", ())
        if items is None:
            return None
        return {name: self.tensor(name, value) for name, value in items.items()}

    def tensor(self, name: str, node: yaml.Node) -> Optional[TensorSpec]:
        items = self.mapping(node, f"input {name!r}", TENSOR_KEYS)
        if items is None:
            return None
        if "shape" not in items:
            self.error(node, f"input {name!r} is missing 'shape'")
            return None
        shape = self.value(items["shape"])
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            self.error(items["shape"], f"shape of {name!r} must be a list of non-negative integers")
            return None
        elements = math.prod(shape)
        if elements > MAX_INPUT_ELEMENTS:
            self.error(items["shape"], f"input {name!r} of shape {shape} has {elements:,} elements, over the cap of "
                       f"{MAX_INPUT_ELEMENTS:,} ({MAX_INPUT_ELEMENTS * 4 >> 20} MiB in float32) for a declared input: "
                       "parity needs small inputs (a short sequence, a batch of one or two)")
            return None
        dtype = self.value(items["dtype"]) if "dtype" in items else "float"
        if dtype != "float" and not isinstance(getattr(torch, str(dtype), None), torch.dtype):
            self.error(items["dtype"], f"unknown dtype {dtype!r} for {name!r} (use 'float' for the case dtype, or a torch dtype name)")
            return None
        low = self.number(items["low"], "low") if "low" in items else None
        high = self.number(items["high"], "high") if "high" in items else None
        is_float = dtype == "float" or getattr(torch, dtype).is_floating_point
        if not is_float and dtype != "bool" and high is None:
            self.error(node, f"integer input {name!r} needs 'high' (exclusive upper bound)")
        if low is not None and high is not None and low >= high:
            self.error(node, f"input {name!r}: low must be below high")
        return TensorSpec(tuple(shape), dtype, low, high)

    def tolerance(self, node: yaml.Node, dtypes: List[str]) -> Dict[str, Dict[str, Any]]:
        items = self.mapping(node, "tolerance", ())
        result: Dict[str, Dict[str, Any]] = {}
        for dtype, value_node in (items or {}).items():
            if dtype not in dtypes:
                self.error(value_node, f"tolerance for {dtype!r}, which this case does not run (runs: {', '.join(dtypes)})")
                continue
            fields = self.mapping(value_node, f"tolerance for {dtype}", CRITERIA_KEYS + ("reason",))
            if fields is None:
                continue
            reason = self.value(fields["reason"]) if "reason" in fields else None
            if not isinstance(reason, str) or not reason.strip():
                self.error(value_node, f"tolerance for {dtype} needs a 'reason'")
            override = {k: self.number(v, k) for k, v in fields.items() if k != "reason"}
            result[dtype] = {**override, "reason": reason}
        return result
