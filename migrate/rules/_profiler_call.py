"""Whether one ``torch.profiler.profile(...)`` call can become ``torch_npu.profiler.profile(...)``,
and the edits that make it so (NPU210, rule ``profiler``).

torch_npu's profiler is not a drop-in for torch's (torch_npu/profiler/profiler.py of the 2.x
wheels, opmap/profiler.yaml): its ``profile`` takes the keywords listed in ``PROFILE_KEYWORDS``,
its activities, schedule actions and experimental config are torch_npu's own types, its
``on_trace_ready`` is meant for ``tensorboard_trace_handler``, and the object has only the methods
in ``PROFILE_METHODS`` — no ``key_averages()``/``events()``: results go to the trace directory
(operator_details.csv, kernel_details.csv, trace_view.json). So a call is migrated only when every
part of it and every use of its object has a torch_npu counterpart; otherwise ``why`` says what
does not, and the call is reported, not rewritten.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, List, Optional, Tuple

import libcst as cst

from npu_migrate.migrate.rules._literals import string_value
from npu_migrate.migrate.rules._syntax import code, keyword_value
from npu_migrate.migrate.rules._table import dotted

NPU = "torch_npu.profiler"
PROFILE = frozenset({"torch.profiler.profile", "torch.profiler.profiler.profile"})
ACTIVITY = frozenset({"torch.profiler.ProfilerActivity", "torch._C._profiler.ProfilerActivity",
                      "torch.autograd.ProfilerActivity", "torch.autograd.profiler.ProfilerActivity"})
SCHEDULE = frozenset({"torch.profiler.schedule", "torch.profiler.profiler.schedule"})
HANDLER = frozenset({"torch.profiler.tensorboard_trace_handler", "torch.profiler.profiler.tensorboard_trace_handler"})
SUPPORTED = frozenset({"torch.profiler.supported_activities", "torch.profiler.profiler.supported_activities"})
TORCH_CONFIG = frozenset({"torch._C._profiler._ExperimentalConfig", "torch.profiler._ExperimentalConfig"})
NPU_CONFIG = "torch_npu.profiler._ExperimentalConfig"
ACTIVITIES = {"CPU": "CPU", "CUDA": "NPU"}  # torch's activity -> torch_npu's
PROFILE_KEYWORDS = frozenset({"activities", "schedule", "on_trace_ready", "record_shapes", "profile_memory",
                              "with_stack", "with_flops", "with_modules", "experimental_config", "use_cuda"})
SCHEDULE_KEYWORDS = frozenset({"wait", "warmup", "active", "repeat", "skip_first", "skip_first_wait"})
HANDLER_KEYWORDS = frozenset({"dir_name", "worker_name"})
PROFILE_METHODS = frozenset({"start", "stop", "step", "export_chrome_trace", "export_stacks", "export_memory_timeline",
                             "add_metadata", "add_metadata_json", "__enter__", "__exit__"})
STACK_METRICS = {"self_cpu_time_total": "self_cpu_time_total", "self_cuda_time_total": "self_npu_time_total",
                 "self_device_time_total": "self_npu_time_total"}

Qualify = Callable[[cst.CSTNode], Optional[str]]


def qualified(qualify: Qualify, node: cst.CSTNode) -> Optional[str]:
    return qualify(node) if dotted(node) is not None else None


def activity(qualify: Qualify, node: cst.CSTNode) -> Optional[str]:
    """``CPU``/``CUDA``/... for ``ProfilerActivity.<X>`` (any spelling that resolves to torch's)."""
    if isinstance(node, cst.Attribute) and qualified(qualify, node.value) in ACTIVITY:
        return node.attr.value
    return None


@dataclass
class Migration:
    """The verdict on one profile call: ``edits`` (node → new source) when ``why`` is empty."""

    edits: List[Tuple[cst.CSTNode, str]] = field(default_factory=list)
    why: str = ""
    dropped: str = ""  # what the migration drops, for the message
    parts: List[cst.CSTNode] = field(default_factory=list)  # nodes this call accounts for (its activities)
    cpu_only: bool = False

    def refuse(self, why: str) -> "Migration":
        self.why = self.why or why
        return self


class ProfileCall:
    """One ``torch.profiler.profile(...)`` call of a file (``ctx``: the rule's FileContext)."""

    def __init__(self, ctx, call: cst.Call) -> None:
        self.ctx, self.call = ctx, call
        self.qualify: Qualify = ctx.names.qualified_name
        self.parents = ctx.tree.parents()

    def migration(self) -> Migration:
        result = Migration()
        call = self.call
        self._activities(keyword_value(call, "activities"), result)
        if result.cpu_only:
            return result
        if any(a.keyword is None for a in call.args):
            return result.refuse("it passes positional or ** arguments, which torch_npu's profile does not take")
        extra = sorted(a.keyword.value for a in call.args if a.keyword.value not in PROFILE_KEYWORDS)
        if extra:
            return result.refuse(f"torch_npu's profile has no {', '.join(extra)} argument")
        self._schedule(keyword_value(call, "schedule"), result)
        self._handler(keyword_value(call, "on_trace_ready"), result)
        self._config(keyword_value(call, "experimental_config"), result)
        self._uses(result)
        result.edits.insert(0, (call.func, f"{NPU}.profile"))
        return result

    # -- arguments --------------------------------------------------------------------------------
    def bound(self, node: Optional[cst.CSTNode]) -> Optional[cst.CSTNode]:
        """The value of a name assigned once in the file and used only here, else the node itself."""
        if not isinstance(node, cst.Name):
            return node
        names = [n for n in self.ctx.tree.of_type(self.ctx.module, cst.Name) if n.value == node.value]
        targets = [n for n in names if isinstance(self.parents.get(id(n)), cst.AssignTarget)]
        if len(targets) != 1 or len(names) != 2:
            return node
        assign = self.parents.get(id(self.parents.get(id(targets[0]))))
        return assign.value if isinstance(assign, cst.Assign) and len(assign.targets) == 1 else node

    def _activities(self, node, result: Migration) -> None:
        value = self.bound(node)
        if value is None:
            return  # torch's default (CPU + CUDA) becomes torch_npu's (CPU + NPU)
        if isinstance(value, cst.Call) and qualified(self.qualify, value.func) in SUPPORTED:
            result.edits.append((value.func, f"{NPU}.supported_activities"))
            return
        if not isinstance(value, (cst.List, cst.Tuple, cst.Set)):
            result.refuse(f"its activities ({code(node).strip()}) are computed at run time")
            return
        kinds = [activity(self.qualify, element.value) for element in value.elements]
        result.parts.extend(element.value for element in value.elements)
        if None in kinds or not set(kinds) <= set(ACTIVITIES):
            result.refuse(f"its activities ({code(value).strip()}) are not all ProfilerActivity.CPU/CUDA")
        elif "CUDA" not in kinds:
            result.cpu_only = True
        else:
            result.edits.extend((e.value, f"{NPU}.ProfilerActivity.{ACTIVITIES[k]}") for e, k in zip(value.elements, kinds))

    def _schedule(self, node, result: Migration) -> None:
        value = self.bound(node)
        if value is None:
            return
        if not (isinstance(value, cst.Call) and qualified(self.qualify, value.func) in SCHEDULE
                and all(a.keyword is not None and a.keyword.value in SCHEDULE_KEYWORDS for a in value.args)):
            result.refuse(f"its schedule ({code(node).strip()}) is not a torch.profiler.schedule(...) with "
                          "torch_npu's arguments (its actions must be torch_npu.profiler.ProfilerAction)")
            return
        result.edits.append((value.func, f"{NPU}.schedule"))

    def _handler(self, node, result: Migration) -> None:
        value = self.bound(node)
        if value is None:
            return
        positional = [a for a in value.args if a.keyword is None] if isinstance(value, cst.Call) else []
        if not (isinstance(value, cst.Call) and qualified(self.qualify, value.func) in HANDLER
                and len(positional) <= 2 and not any(a.star for a in value.args)
                and all(a.keyword is None or a.keyword.value in HANDLER_KEYWORDS for a in value.args)):
            result.refuse(f"its on_trace_ready ({code(node).strip()}) is not a tensorboard_trace_handler(dir_name, "
                          "worker_name): a handler of its own receives the profiler and reads torch-only results")
            return
        result.edits.append((value.func, f"{NPU}.tensorboard_trace_handler"))

    def _config(self, node, result: Migration) -> None:
        value = self.bound(node)
        if value is None:
            return
        name = qualified(self.qualify, value.func) if isinstance(value, cst.Call) else None
        if name == NPU_CONFIG:
            return
        if name in TORCH_CONFIG:
            result.edits.append((node, "None"))
            result.dropped = f"experimental_config={code(node).strip()} (torch's CUPTI settings) dropped"
            return
        result.refuse(f"its experimental_config ({code(node).strip()}) is not known to be torch's or torch_npu's")

    # -- the profiler object --------------------------------------------------------------------
    def _uses(self, result: Migration) -> None:
        """Every use of the profiler object must be a method torch_npu's profile has."""
        holder = self.parents.get(id(self.call))
        if isinstance(holder, cst.WithItem):
            if holder.asname is None:
                return
            target = holder.asname.name
        elif isinstance(holder, cst.Assign) and len(holder.targets) == 1:
            target = holder.targets[0].target
        elif isinstance(holder, cst.Expr):
            return
        else:
            result.refuse("the profiler object leaves the expression (returned or passed on), so its readers are not known")
            return
        for use in self._readers(target):
            why = self._method(use)
            if why:
                result.refuse(why)
                return
            self._stack_metric(use, result)

    def _readers(self, target: cst.CSTNode) -> List[cst.CSTNode]:
        """The nodes that read the object: ``<name>.<x>`` in the name's function (or module), or
        ``<anything>.<attr>.<x>`` anywhere in the file for ``self.<attr> = profile(...)``."""
        if isinstance(target, cst.Name):
            scope = self._scope(target)
            found = [n for n in self.ctx.tree.of_type(scope, cst.Name) if n.value == target.value and n is not target]
        elif isinstance(target, cst.Attribute):
            found = [n for n in self.ctx.tree.of_type(self.ctx.module, cst.Attribute)
                     if n.attr.value == target.attr.value and n is not target]
        else:
            return [target]
        return [n for n in found if not isinstance(self.parents.get(id(n)), cst.AssignTarget)]

    def _scope(self, node: cst.CSTNode) -> cst.CSTNode:
        while node is not None and not isinstance(node, (cst.FunctionDef, cst.Module)):
            node = self.parents.get(id(node))
        return node if node is not None else self.ctx.module

    def _method(self, use: cst.CSTNode) -> str:
        """Why ``use`` (a read of the object) has no torch_npu counterpart ('' when it has)."""
        member = self.parents.get(id(use))
        if isinstance(member, cst.Attribute) and member.value is use and member.attr.value in PROFILE_METHODS:
            return ""
        if isinstance(member, cst.Attribute) and member.value is use:
            return f"its object is read with .{member.attr.value}, which torch_npu's profile does not have " \
                   "(no key_averages()/events(): its results go to the trace directory)"
        return f"its object is used as {code(member).strip()[:60]!r}, which torch_npu's profile may not support"

    def _stack_metric(self, use: cst.CSTNode, result: Migration) -> None:
        """``prof.export_stacks(path, "self_cuda_time_total")`` → torch_npu's metric name."""
        member = self.parents.get(id(use))
        call = self.parents.get(id(member))
        if member.attr.value != "export_stacks" or not isinstance(call, cst.Call) or call.func is not member:
            return
        metric = keyword_value(call, "metric")
        positional = [a.value for a in call.args if a.keyword is None]
        metric = metric if metric is not None else (positional[1] if len(positional) > 1 else None)
        if metric is None:
            return
        name = string_value(metric)
        if name not in STACK_METRICS:
            result.refuse(f"export_stacks' metric {code(metric).strip()} has no torch_npu counterpart")
        elif STACK_METRICS[name] != name:
            result.edits.append((metric, repr(STACK_METRICS[name]).replace("'", '"')))
