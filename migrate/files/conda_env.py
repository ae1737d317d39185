"""conda environment files (``environment*.yml``, ``conda*.yml``, ``env.yml``): the ``channels``
(``nvidia`` and other CUDA channels are reported), the conda ``dependencies`` (match specs such as
``pytorch-cuda=12.1`` or ``pytorch=2.1.0=py3.10_cuda12.1_cudnn8_0``) and the requirements of their
``pip:`` section. An exact torch pin (pip's ``torch==X`` or conda's ``pytorch=X``) gains its
torch-npu requirement in the ``pip:`` section, on its own line.
"""

from __future__ import annotations

import re
from typing import List, Optional

import yaml

from npu_migrate.migrate.files.base import FileKind, FileSyntaxError, Scan, TextEdit
from npu_migrate.migrate.files.declared import Declared, conda_spec, declared, line_end
from npu_migrate.migrate.files.packages import check_index, check_packages

_NAME = re.compile(r"(?i)^(environment|conda[-_]?(env|environment)?|env)([-_.][\w.-]*)?\.ya?ml$")


def _compose(text: str) -> Optional[yaml.Node]:
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise FileSyntaxError(mark.line + 1 if mark else 1, f"does not parse as YAML: {exc}") from None


def _item(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and isinstance(node.value, str)


def _after_item(text: str, node: yaml.ScalarNode):
    """A new ``- requirement`` line below a block-sequence item, same indentation (None: flow style)."""
    line_start = text.rfind("\n", 0, node.start_mark.index) + 1
    prefix = text[line_start:node.start_mark.index]
    if not re.fullmatch(r"[ \t]*-[ \t]+", prefix):
        return None
    stop = line_end(text, node.end_mark.index)
    newline = "" if text[stop - 1:stop] == "\n" else "\n"
    return lambda requirement: TextEdit(stop, stop, f"{newline}{prefix}{requirement}\n")


class CondaEnvironment(FileKind):
    name = "conda"
    language = "yaml"
    declares_packages = True

    def matches(self, path: str, head: bytes = b"") -> bool:
        return bool(_NAME.match(path.rsplit("/", 1)[-1]))

    def problem(self, text: str, path: str = "") -> Optional[str]:
        try:
            yaml.safe_load(text)
        except yaml.YAMLError as exc:
            return f"not valid YAML: {exc}"
        return None

    def scan(self, scan: Scan) -> None:
        root = _compose(scan.text)
        if not isinstance(root, yaml.MappingNode):
            return
        sections = {key.value: value for key, value in root.value if isinstance(key, yaml.ScalarNode)}
        channels = sections.get("channels")
        if isinstance(channels, yaml.SequenceNode):
            for node in channels.value:
                if _item(node):
                    check_index(scan, node.value, node.start_mark.index)
        dependencies = sections.get("dependencies")
        if not isinstance(dependencies, yaml.SequenceNode):
            return
        pip_items = [value for node in dependencies.value if isinstance(node, yaml.MappingNode)
                     for key, value in node.value if getattr(key, "value", None) == "pip"
                     and isinstance(value, yaml.SequenceNode)]
        pip_last = next((seq.value[-1] for seq in pip_items if seq.value and _item(seq.value[-1])), None)
        found: List[Declared] = []
        for node in dependencies.value:
            if _item(node):
                if "::" in node.value:
                    check_index(scan, node.value.split("::", 1)[0], node.start_mark.index)
                sibling = _after_item(scan.text, pip_last) if pip_last is not None else None
                item = conda_spec(node.value, node.start_mark.index, "conda", sibling)
                if item is not None:
                    found.append(item)
        for sequence in pip_items:
            for node in sequence.value:
                if _item(node):
                    if node.value.startswith("-"):
                        parts = node.value.split(None, 1)
                        if len(parts) == 2 and parts[0] in ("--extra-index-url", "--index-url", "-i", "-f",
                                                            "--find-links"):
                            check_index(scan, parts[1], node.start_mark.index)
                        continue
                    item = declared(node.value, node.start_mark.index, "pip", _after_item(scan.text, node))
                    if item is not None:
                        found.append(item)
        check_packages(scan, found)
