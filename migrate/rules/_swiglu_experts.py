"""Hugging Face's experts implementations: the gate of ``grouped_mm`` / ``batched_mm`` (NPU330).

transformers 5 runs an MoE experts class decorated with ``@use_experts_implementation`` through
``config._experts_implementation``, ``"grouped_mm"`` by default: library functions
(``transformers.integrations.moe``) that gate every expert's ``[gate | up]`` projection through
``self._apply_gate(gate_up_out)``, which the decorator sets to the library's
``_default_apply_gate`` (``gate, up = gate_up_out.chunk(2, dim=-1); return self.act_fn(gate) * up``)
only when the class has none. The class's own eager ``forward`` (rewritten where it is written)
runs only with ``experts_implementation="eager"``; the default path never reaches it.

So the class gets its own ``_apply_gate`` computing what the library's does, on the fused kernel
where ``npu_glue.glu_halves`` proves it exact (SiLU → npu_swiglu, GELU → npu_geglu, else the same
two lines), and the decorator keeps it. Only for the decorator's defaults (``has_gate`` and
``is_concatenated`` not set to False: gate and up halves side by side), a class that defines no
``_apply_gate`` of its own and sets ``self.act_fn``.
"""

from __future__ import annotations

from typing import Callable, Optional

import libcst as cst
import libcst.helpers  # noqa: F401 (cst.helpers)

from npu_migrate.migrate.edits import Splice, code as template
from npu_migrate.migrate.rules._fused_site import sited

DECORATOR = "transformers.integrations.moe.use_experts_implementation"
DECORATOR_NAMES = (DECORATOR, "transformers.integrations.use_experts_implementation")
METHOD = '''
def _apply_gate(self, gate_up_out):
    # npu-migrate NPU330: transformers' grouped_mm/batched_mm experts gate here; the library's default
    # (act_fn(gate) * up of the two halves) on the fused kernel where npu_glue proves it exact
    return {call}
'''


def _relative_names(module: cst.Module) -> set:
    """Local names bound to the decorator by a relative import inside transformers
    (``from ...integrations import use_experts_implementation``), which qualified names do not
    resolve."""
    names = set()
    for stmt in module.body:
        for small in getattr(stmt, "body", ()) if isinstance(stmt, cst.SimpleStatementLine) else ():
            if not (isinstance(small, cst.ImportFrom) and small.relative and small.module is not None):
                continue
            if cst.helpers.get_full_name_for_node(small.module) not in ("integrations", "integrations.moe"):
                continue
            for alias in small.names if not isinstance(small.names, cst.ImportStar) else ():
                if isinstance(alias.name, cst.Name) and alias.name.value == "use_experts_implementation":
                    names.add(alias.asname.name.value if alias.asname else alias.name.value)
    return names


def _decorator(node: cst.ClassDef, qualified: Callable, module: cst.Module) -> Optional[cst.Decorator]:
    relative = None
    for decorator in node.decorators:
        target = decorator.decorator
        func = target.func if isinstance(target, cst.Call) else target
        if qualified(func) in DECORATOR_NAMES:
            return decorator
        if isinstance(func, cst.Name):
            relative = _relative_names(module) if relative is None else relative
            if func.value in relative:
                return decorator
    return None


def _defaults(decorator: cst.Decorator) -> bool:
    """The decorator keeps ``has_gate`` and ``is_concatenated`` true (not passed, or passed True)."""
    target = decorator.decorator
    for arg in target.args if isinstance(target, cst.Call) else ():
        if arg.keyword is None and not isinstance(arg.value, cst.Name):
            return False
        if arg.keyword is not None and arg.keyword.value in ("has_gate", "is_concatenated") and not (
                isinstance(arg.value, cst.Name) and arg.value.value == "True"):
            return False
    return True


def _sets_act_fn(node: cst.ClassDef) -> bool:
    for stmt in node.body.body:
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == "__init__":
            for target in _assigned_attributes(stmt):
                if target == "act_fn":
                    return True
    return False


def _assigned_attributes(func: cst.FunctionDef):
    for stmt in func.body.body if isinstance(func.body, cst.IndentedBlock) else ():
        for small in getattr(stmt, "body", ()):
            if isinstance(small, cst.Assign):
                for target in small.targets:
                    t = target.target
                    if isinstance(t, cst.Attribute) and isinstance(t.value, cst.Name) and t.value.value == "self":
                        yield t.attr.value


def last_statement(node: cst.ClassDef) -> cst.CSTNode:
    """The class's last simple statement (inside its last method): the finding points where the
    method is added, so the site's line is in the diff's hunk (and in its SARIF fix)."""
    stmt = node.body.body[-1]
    while isinstance(getattr(stmt, "body", None), cst.IndentedBlock) and stmt.body.body:
        stmt = stmt.body.body[-1]
    return stmt


def experts_gate(node: cst.ClassDef, qualified: Callable, module: cst.Module) -> Optional[Splice]:
    """The insertion of ``_apply_gate`` into an experts class the library gates with its default, or None."""
    decorator = _decorator(node, qualified, module)
    if decorator is None or not _defaults(decorator) or not isinstance(node.body, cst.IndentedBlock):
        return None
    if any(isinstance(s, cst.FunctionDef) and s.name.value == "_apply_gate" for s in node.body.body):
        return None
    if not _sets_act_fn(node):
        return None
    call = sited("npu_glue.glu_halves(self.act_fn, gate_up_out)")
    end = len(node.body.body)
    return Splice(node.body, end, end, (template(METHOD.format(call=call)),))
