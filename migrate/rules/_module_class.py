"""The class a ``self.<attr>`` module is built from, when the file shows it, and whether a call of it
can ever be the plain ``nn.Linear`` that ``npu_glue.swiglu_linear`` and friends require.

The helper's guard (``_plain_linear``) fuses two projections only when each module is an
``nn.Linear`` whose ``forward`` is ``nn.Linear.forward``. When ``__init__`` builds the module from a
class defined in the same file (``self.w1 = Linear(dim, hidden)``) that does not derive from
``nn.Linear``, or overrides ``forward`` (a LoRA or quantized linear), the guard can never hold:
the site is reported with that reason instead of being counted as rewritten.
"""

from __future__ import annotations

from typing import Dict, Optional

import libcst as cst

LINEARS = ("torch.nn.Linear", "torch.nn.modules.linear.Linear")


def _classes(module: cst.Module) -> Dict[str, cst.ClassDef]:
    return {s.name.value: s for s in module.body if isinstance(s, cst.ClassDef)}


def _defines_forward(cls: cst.ClassDef) -> bool:
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
    return any(isinstance(s, cst.FunctionDef) and s.name.value == "forward" for s in body)


def never_plain_linear(view, module_value, module: cst.Module, qualify) -> Optional[str]:
    """Why ``module_value`` (a ``self.<attr>`` called on the input) can never be a plain nn.Linear,
    or None when it is one or the file does not show what it is."""
    if module_value is None or module_value.op != "attr" or module_value.input is None \
            or module_value.input.op != "param" or module_value.input.name != "self":
        return None
    built = view.scope.attributes.get(module_value.name or "")
    if not isinstance(built, cst.Call) or not isinstance(built.func, cst.Name):
        return None
    classes = _classes(module)
    name, seen = built.func.value, set()
    while name in classes and name not in seen and qualify(cst.Name(name)) is None:
        seen.add(name)
        cls = classes[name]
        if _defines_forward(cls):
            return f"`self.{module_value.name}` is a `{built.func.value}` (defined in this file) whose forward is " \
                   "its own, not nn.Linear's"
        bases = [qualify(b.value) or (b.value.value if isinstance(b.value, cst.Name) else None)
                 for b in cls.bases if b.keyword is None]
        if any(base in LINEARS for base in bases):
            return None
        if len(bases) == 1 and bases[0] in classes:
            name = bases[0]
            continue
        if bases and all(base and base.startswith("torch.") for base in bases):
            return f"`self.{module_value.name}` is a `{built.func.value}` (defined in this file), not an nn.Linear"
        return None  # a base from elsewhere: the file does not show what it is
    return None
