"""The typed op-table record and its validation.

One record per torch API (its qualified name, e.g. ``torch.cuda.synchronize``; ``Tensor.cuda`` for a
method; a trailing ``.*`` makes a prefix record that covers every name below it). The record says
what the API becomes on an NPU and, when it cannot simply be migrated, the fallback plan. A named
plan (``NamedPlan``, a built-in file's ``plans:`` section) is a plan the rules read by name
(``opmap.plans``).
"""

from __future__ import annotations

import keyword
import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Optional, Tuple

from .errors import SchemaError  # noqa: F401 (raised by the validation; read here too)

if TYPE_CHECKING:
    import yaml

# The validation below reads YAML nodes (``yaml_source``, imported by each function): the records
# themselves (``Fallback`` in every finding) are used by runs that never read the table.

STATUSES = ("native", "rename", "fused", "fallback", "unsupported")
PLANS = ("cpu", "composite", "custom-kernel", "replace-library", "manual")
DTYPES = ("float32", "float16", "bfloat16")
CODE_RE = re.compile(r"^NPU\d{3}$")
API_RE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*(\.\*)?$")


@dataclass(frozen=True)
class Fallback:
    plan: str  # one of PLANS
    detail: str  # what the user should do, concretely

    def filled(self, **fields: str) -> "Fallback":
        """This plan with its detail's ``{fields}`` filled from a site (a named plan that is a template)."""
        return Fallback(self.plan, self.detail.format(**fields))


@dataclass(frozen=True)
class NamedPlan:
    """A plan declared by name in a built-in op-table file's ``plans:`` section (``opmap.plans``)."""

    name: str  # "<file stem>.<name>", e.g. "attention.underflow"
    fallback: Fallback
    source: str = ""  # "file:line" it was declared at (for ``migrate ops show``)


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float
    reason: str


@dataclass(frozen=True)
class OpRecord:
    api: str
    status: str
    code: Optional[str] = None
    target: Optional[str] = None
    summary: str = ""
    args: Dict[str, str] = field(default_factory=dict)  # original argument name -> NPU argument name
    preconditions: Tuple[str, ...] = ()
    tolerance: Dict[str, Tolerance] = field(default_factory=dict)
    fallback: Optional[Fallback] = None
    source: str = ""  # "file:line" the record came from (for ``migrate ops show``)

    @property
    def is_prefix(self) -> bool:
        return self.api.endswith(".*")


_RECORD_KEYS = {"api", "status", "code", "target", "summary", "args", "preconditions", "tolerance", "fallback"}


def text(path: Path, node: yaml.Node, what: str) -> str:
    """A checked non-empty string value."""
    from .yaml_source import SchemaError, line_of, plain

    value = plain(node)
    if not isinstance(value, str) or not value.strip():
        raise SchemaError(path, line_of(node), f"{what} must be a non-empty string")
    return value


def parse_fallback(path: Path, node: yaml.Node) -> Fallback:
    from .yaml_source import check_keys

    return _fallback(path, check_keys(path, node, {"plan", "detail"}, ("plan", "detail"), "fallback"), "fallback.")


def _fallback(path: Path, keys: Dict[str, yaml.Node], where: str) -> Fallback:
    """The plan of checked ``plan`` and ``detail`` nodes (``where`` prefixes their names in errors)."""
    from .yaml_source import SchemaError, line_of

    plan = text(path, keys["plan"], f"{where}plan")
    if plan not in PLANS:
        raise SchemaError(path, line_of(keys["plan"]), f"{where}plan {plan!r} is not one of {', '.join(PLANS)}")
    return Fallback(plan, text(path, keys["detail"], f"{where}detail"))


def parse_plan(path: Path, node: yaml.Node) -> NamedPlan:
    """Validate one entry of a ``plans:`` section (``name``, ``plan``, ``detail``); its name is read
    as ``<file stem>.<name>``, and a detail with ``{fields}`` is a template (``Fallback.filled``)."""
    from .yaml_source import SchemaError, check_keys, line_of

    keys = check_keys(path, node, {"name", "plan", "detail"}, ("name", "plan", "detail"), "named plan")
    name = text(path, keys["name"], "name")
    if not name.isidentifier():
        raise SchemaError(path, line_of(keys["name"]), f"plan name {name!r} must be a Python identifier "
                                                       f"(it is read as {Path(path).stem}.<name>)")
    fallback = _fallback(path, keys, f"plan {name!r}: ")
    try:
        fields = [field for _, field, _, _ in string.Formatter().parse(fallback.detail) if field is not None]
    except ValueError as exc:
        raise SchemaError(path, line_of(keys["detail"]), f"plan {name!r}: detail is not a valid template ({exc}); "
                                                         "a literal brace is written {{ or }}") from None
    bad = next((field for field in fields if not field.isidentifier()), None)
    if bad is not None:
        raise SchemaError(path, line_of(keys["detail"]), f"plan {name!r}: template field {{{bad}}} is not a name")
    return NamedPlan(f"{Path(path).stem}.{name}", fallback, f"{path}:{line_of(node)}")


def _tolerance(path: Path, node: yaml.Node) -> Dict[str, Tolerance]:
    from .yaml_source import SchemaError, check_keys, line_of, mapping_items, \
        number_problem, plain

    result = {}
    for dtype, key_node, value_node in mapping_items(path, node, "tolerance"):
        if dtype not in DTYPES:
            raise SchemaError(path, line_of(key_node), f"tolerance dtype {dtype!r} is not one of {', '.join(DTYPES)}")
        keys = check_keys(path, value_node, {"rtol", "atol", "reason"}, ("rtol", "atol", "reason"), f"tolerance.{dtype}")
        numbers = {}
        for name in ("rtol", "atol"):
            value = plain(keys[name])
            problem = "must be a number" if isinstance(value, str) else number_problem(value, minimum=0)
            if problem:
                raise SchemaError(path, line_of(keys[name]), f"tolerance.{dtype}.{name} {problem} (a non-negative number)")
            numbers[name] = float(value)
        result[dtype] = Tolerance(numbers["rtol"], numbers["atol"], text(path, keys["reason"], f"tolerance.{dtype}.reason"))
    return result


def parse_record(path: Path, node: yaml.Node) -> OpRecord:
    """Validate one record node; every problem names ``path:line``."""
    from .yaml_source import SchemaError, check_keys, dotted_name_problem, line_of, mapping_items, \
        plain

    keys = check_keys(path, node, _RECORD_KEYS, ("api", "status"), "op record")
    api = text(path, keys["api"], "api")
    if not API_RE.match(api):
        raise SchemaError(path, line_of(keys["api"]), f"api {api!r} is not a dotted qualified name (optionally ending in .*)")
    where = f"record {api!r}"
    status = text(path, keys["status"], "status")
    if status not in STATUSES:
        raise SchemaError(path, line_of(keys["status"]), f"{where}: status {status!r} is not one of {', '.join(STATUSES)}")
    code = text(path, keys["code"], "code") if "code" in keys else None
    if code is not None and not CODE_RE.match(code):
        raise SchemaError(path, line_of(keys["code"]), f"{where}: code {code!r} must look like NPU123")
    if status != "native" and code is None:
        raise SchemaError(path, line_of(node), f"{where}: status {status!r} needs a diagnostic code")
    target = text(path, keys["target"], "target") if "target" in keys else None
    problem = dotted_name_problem(target) if target is not None else None
    if problem:  # the target is copied into migrated code: a name, never an expression
        raise SchemaError(path, line_of(keys["target"]), f"{where}: target {problem}")
    if status in ("rename", "fused") and target is None:
        raise SchemaError(path, line_of(node), f"{where}: status {status!r} needs a target")
    fallback = parse_fallback(path, keys["fallback"]) if "fallback" in keys else None
    if status in ("fallback", "unsupported") and fallback is None:
        raise SchemaError(path, line_of(node), f"{where}: status {status!r} needs a fallback plan (plan + detail)")
    args = {}
    if "args" in keys:
        for name, key_node, value_node in mapping_items(path, keys["args"], "args"):
            args[name] = text(path, value_node, f"args.{name}")
            bad = next((n for n in (name, args[name]) if not n.isidentifier() or keyword.iskeyword(n)), None)
            if bad is not None:
                raise SchemaError(path, line_of(key_node), f"{where}: args.{name}: {bad!r} is not an argument name")
    preconditions = ()
    if "preconditions" in keys:
        value = plain(keys["preconditions"])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise SchemaError(path, line_of(keys["preconditions"]), f"{where}: preconditions must be a list of strings")
        preconditions = tuple(value)
    return OpRecord(
        api=api,
        status=status,
        code=code,
        target=target,
        summary=text(path, keys["summary"], "summary") if "summary" in keys else "",
        args=args,
        preconditions=preconditions,
        tolerance=_tolerance(path, keys["tolerance"]) if "tolerance" in keys else {},
        fallback=fallback,
        source=f"{path}:{line_of(node)}",
    )
