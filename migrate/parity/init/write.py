"""Writing the spec (``parity.yaml``) and its harness (``parity_harness.py``) from the drafts.

The harness holds one factory per model (``build_<Model>``: the configuration object, then the
model) and one per decode and padded case; the spec holds every value a user may want to change (the sizes,
the inputs, the runs), with a comment per case naming the sites it runs, and every ``TODO``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List

import yaml

from .plan import Draft

SPEC_NAME, HARNESS_NAME = "parity.yaml", "parity_harness.py"


def _factory_name(draft: Draft) -> str:
    return ("decode_" if draft.decode else "padded_" if draft.padded else "build_") + _ident(draft)


def _ident(draft: Draft) -> str:
    """The model's label (``GPT``, or ``adapter.GPT`` when two classes share the name) as a name."""
    return draft.label.replace(".", "_")


def case_mapping(draft: Draft) -> Dict[str, Any]:
    built = draft.built
    kwargs: Dict[str, Any] = {}
    if built.kind in ("config", "namespace"):
        config = dict(built.kwargs)
        extra = dict(built.extra)
        for flag, value in draft.flipped.items():
            (extra if flag in extra else config)[flag] = value
        kwargs = {"config": config, **extra}
    else:
        kwargs = {**built.kwargs, **draft.flipped}
    case: Dict[str, Any] = {"name": draft.name, "factory": f"{HARNESS_NAME}:{_factory_name(draft)}"}
    if kwargs:
        case["kwargs"] = kwargs
    inputs = {k: v for k, v in draft.inputs.tensors.items() if not (draft.padded and k == draft.inputs.mask)}
    case["inputs"] = inputs or None
    case.update(draft.runs)
    if draft.inputs.output and not draft.decode:
        case["output"] = draft.inputs.output
    return case


def spec_text(drafts: List[Draft], original: Path, migrated: Path, spec_dir: Path, header: List[str]) -> str:
    lines = [f"# {line}" if line else "#" for line in header]
    lines += [f"original: {_quote(_relative(original, spec_dir))}", f"migrated: {_quote(_relative(migrated, spec_dir))}",
              "cases:"]
    for draft in drafts:
        sites = ", ".join(str(s) for s in sorted(draft.model.sites, key=lambda s: (s.path, s.line)))
        builder = draft.model.builder
        built_by = f"{builder.name} ({builder.where}) builds " if builder is not None else ""
        lines.append(f"  # {built_by}{draft.model.cls.name} ({draft.model.cls.where}) runs {sites}")
        for todo in draft.todos:
            lines.append(f"  # {todo}")
        mapping = case_mapping(draft)
        if mapping["inputs"] is None:
            mapping["inputs"] = "TODO: the inputs of this model (no argument of its forward is required)"
        body = yaml.safe_dump([mapping], sort_keys=False, default_flow_style=None, width=110, allow_unicode=True)
        lines += ["  " + line for line in body.rstrip("\n").splitlines()]
    return "\n".join(lines) + "\n"


def _relative(path: Path, start: Path) -> str:
    try:
        return os.path.relpath(path, start).replace(os.sep, "/")
    except ValueError:  # another drive
        return str(path)


def _quote(text: str) -> str:
    return yaml.safe_dump(text, default_style=None).splitlines()[0]


def harness_text(drafts: List[Draft], package: str) -> str:
    head = [
        '"""The factories of parity.yaml, written by `migrate parity init` (edit freely; `migrate parity init',
        '--force` writes it again). Each side of a parity run imports the model from its own tree (tree_module)."""',
        "",
        "import argparse  # noqa: F401 (argparse-style configurations)",
        "import importlib  # noqa: F401 (configuration classes from installed packages)",
        "",
        "from npu_migrate.migrate.parity.init.harness import Decode, Padded, tree_module  # noqa: F401",
        "",
        f"PACKAGE = {package!r}  # the tree's own package name, when the tree is a package",
    ]
    body: List[str] = []
    done = set()
    for draft in drafts:
        name = _factory_name(draft)
        if name in done:
            continue
        done.add(name)
        body += ["", ""] + (_decode(draft) if draft.decode else _padded(draft) if draft.padded else _build(draft))
    return "\n".join(head + body) + "\n"


def _build(draft: Draft) -> List[str]:
    cls, built = draft.model.cls, draft.built
    model = f'tree_module({cls.path!r}, PACKAGE).{cls.name}'
    if built.kind == "kwargs":
        return [f"def build_{_ident(draft)}(**kwargs):", f"    return {model}(**kwargs)"]
    if built.kind == "function":
        path, name = built.config.split(":")
        return [f"def build_{_ident(draft)}(**kwargs):", f"    return tree_module({path!r}, PACKAGE).{name}(**kwargs)"]
    if built.kind == "namespace":
        config = "argparse.Namespace(**config)"
    elif built.config and ".py:" in built.config:
        path, name = built.config.split(":")
        config = f"tree_module({path!r}, PACKAGE).{name}(**config)"
    else:
        module, _, name = (built.config or "").rpartition(".")
        config = f"importlib.import_module({module!r}).{name}(**config)"
    return [f"def build_{_ident(draft)}(config, **kwargs):", f"    return {model}({config}, **kwargs)"]


def _arguments(draft: Draft) -> str:
    return "config, **kwargs" if draft.built.kind not in ("kwargs", "function") else "**kwargs"


def _decode(draft: Draft) -> List[str]:
    args = _arguments(draft)
    return [f"def decode_{_ident(draft)}({args}):",
            f"    return Decode(build_{_ident(draft)}({args}), {draft.inputs.decode!r}, {draft.inputs.tokens!r})"]


def _padded(draft: Draft) -> List[str]:
    args, inputs = _arguments(draft), draft.inputs
    return [f"def padded_{_ident(draft)}({args}):",
            f"    return Padded(build_{_ident(draft)}({args}), {inputs.sequence!r}, {inputs.mask!r}, {inputs.mask_style!r})"]
