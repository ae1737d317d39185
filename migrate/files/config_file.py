"""YAML and JSON configuration files of a repository (``*.yaml``, ``*.yml``, ``*.json``: Lightning CLI,
Hydra, DeepSpeed and Accelerate configs, docker compose files, CI workflows, VS Code launch files).

Each value of a key is looked up in the environment table's ``config`` records by its key and its
whole value (``opmap/environment.yaml``): a device or collective-backend value with an exact NPU
name is rewritten (``device: cuda`` → ``npu``, ``backend: nccl`` → ``hccl``, NPU224) where the
repository's code imports torch_npu, and reported otherwise; accelerator choices (``accelerator:
gpu``, ``distributed_type: MULTI_GPU``) and every other whole ``cuda``/``nccl`` value are reported
with their plan. Only the value's characters are replaced (its quotes, comments and layout stay as
they are). A mapping under an environment key (``env:``, ``environment:``, ``variables:``; also
``- NAME=value`` and ``- {name: NAME, value: ...}`` lists) holds environment variables, decided as
a launcher's are (``CUDA_VISIBLE_DEVICES`` → ``ASCEND_RT_VISIBLE_DEVICES``, NPU221), with the
``${NAME}`` / ``${oc.env:NAME}`` / ``${{ env.NAME }}`` references of the file's strings.

A file that mentions CUDA but is not valid YAML/JSON (a template, JSON Lines) is reported (NPU139)
and left as it is; one too large or not UTF-8 is data, copied as it is.
"""

from __future__ import annotations

import re
from typing import List, Optional, Tuple

import yaml

from npu_migrate.migrate.files.base import FileKind, FileSyntaxError, Scan, TextEdit
from npu_migrate.migrate.files.commands import read_shell
from npu_migrate.migrate.files.config_tree import MAP, SCALAR, SEQ, Node, json_tree, walk, yaml_tree
from npu_migrate.migrate.files.environment import Launcher
from npu_migrate.migrate.files.shell_words import parse
from npu_migrate.opmap import Fallback

UNREADABLE = "NPU139"
SUFFIXES = (".yaml", ".yml", ".json")
ENV_KEYS = frozenset({"env", "envs", "environment", "env_vars", "envvars", "env_variables", "environment_variables",
                      "variables"})
BUILD_ARGS = frozenset({"build-args", "build_args"})  # and compose's build: args:
_BUILD_ARG_KEPT = "a build argument is read by the Dockerfile's ARG of that name, which this file does not rename"
# keys whose string is a shell command line (CI steps, compose commands); list items only under the *script keys
SHELL_KEYS = frozenset({"run", "script", "before_script", "after_script", "command", "entrypoint", "cmd"})
SCRIPT_LISTS = frozenset({"script", "before_script", "after_script"})
IMAGE_KEYS = frozenset({"image", "container"})  # a container image (compose, Kubernetes, CI jobs)
_URL = re.compile(r"^\s*[a-z][a-z0-9+.-]*://\S+\s*$")
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_REFERENCES = re.compile(r"\$\{oc\.env:(?P<hydra>[A-Za-z_][A-Za-z0-9_]*)"
                         r"|\$\{\{[^}]*?\benv\.(?P<actions>[A-Za-z_][A-Za-z0-9_]*)"
                         r"|\$\{?(?P<shell>[A-Za-z_][A-Za-z0-9_]*)")
_UNREADABLE_PLAN = Fallback("manual", "Check the file by hand for device (cuda), backend (nccl) and accelerator (gpu) "
                                      "values and CUDA/NCCL environment variables; npu-migrate could not read it as "
                                      "YAML/JSON (a template is rendered before it is read, JSON Lines is data).")


def is_json(path: str) -> bool:
    return path.lower().endswith(".json")


def trees(path: str, text: str) -> List[Node]:
    return json_tree(text) if is_json(path) else yaml_tree(text)


class ConfigFile(FileKind):
    name = "config"
    language = "yaml"
    triggers = (b"cuda", b"CUDA", b"nccl", b"NCCL", b"gpu", b"GPU", b"nvidia", b"NVIDIA")
    maybe_data = True

    def matches(self, path: str, head: bytes = b"") -> bool:
        return path.lower().endswith(SUFFIXES)

    def problem(self, text: str, path: str = "") -> Optional[str]:
        try:
            if is_json(path):
                json_tree(text)
            else:
                list(yaml.safe_load_all(text))
        except (FileSyntaxError, yaml.YAMLError) as exc:
            return f"not valid {'JSON' if is_json(path) else 'YAML'}: {exc}"
        return None

    def scan(self, scan: Scan) -> None:
        try:
            documents = trees(scan.path, scan.text)
        except FileSyntaxError as exc:
            at = scan.line_start(exc.line)
            scan.report(at, UNREADABLE, f"{exc.message}: its values were not checked", _UNREADABLE_PLAN)
            return
        launcher, build_args = Launcher(scan), Launcher(scan, kept=_BUILD_ARG_KEPT)
        for document in documents:
            environment = set()  # the nodes of environment mappings (the launchers decide them)
            for path, node, item in walk(document):
                settings = None if item else _settings(path, launcher, build_args)
                if node.kind == MAP and settings:
                    environment |= _environment_map(settings, node)
                elif node.kind == SEQ and settings:
                    environment |= _environment_list(settings, node)
                elif node.kind == SCALAR and settings and node.string and "=" in node.value:
                    environment |= _environment_lines(settings, node)
                elif node.kind == SCALAR and id(node) not in environment:
                    key = path[-1].lower() if path else ""
                    if key in IMAGE_KEYS and node.string and not item:
                        launcher.image(node.value, node.start)
                    elif node.string and _URL.match(node.value):  # a package index (torch_index_url: .../whl/cu124)
                        launcher.index(node.value.strip(), node.start)
                    if not _shell(launcher, key, node, item):
                        _references(launcher, scan.text, node)
                        if path:
                            _value(scan, path, node, item)
        launcher.finish()
        build_args.finish()


def _value(scan: Scan, path: Tuple[str, ...], node: Node, item: bool) -> None:
    """A value of the key ``path[-1]`` (``item``: an item of the list under it)."""
    key = path[-1].lower()
    record = scan.table.config("" if item else key, node.value)  # a list is choices: only the catch-all applies
    if record is None:
        return
    where = ".".join(path)
    shown = f"{where}: {node.value}"
    if record.status != "rename":
        scan.report(node.start, record.code, f"{shown}: {record.reason}", record.fallback, api=where)
        return
    new = record.renamed_value(node.value)
    why = None
    if new is None:
        why = f"{node.value!r} is not a value the rename is exact for ({record.values.described})"
    elif node.verbatim is None:
        why = "it is written as a block or with escapes, which npu-migrate does not edit"
    elif not scan.facts.imports_torch_npu:
        why = f"the repository's Python code does not import torch_npu, which makes {new!r} known to torch"
    if why is not None:
        scan.report(node.start, record.code, f"{shown} not rewritten: {why} ({record.reason})", record.fallback,
                    api=where)
        return
    scan.rewrite(node.verbatim, record.code, f"{shown} → {new}", [TextEdit(node.verbatim, node.verbatim +
                                                                         len(node.value), new)],
                 target=new, api=where)


def _settings(path: Tuple[str, ...], launcher: Launcher, build_args: Launcher) -> Optional[Launcher]:
    """The launcher that decides the variables under ``path``: environment variables, or a Dockerfile's
    build arguments (compose's ``build: args:``, CI's ``build-args:``; None: neither."""
    key = path[-1].lower() if path else ""
    if key in BUILD_ARGS or key == "args" and len(path) > 1 and path[-2].lower() == "build":
        return build_args
    return launcher if key in ENV_KEYS else None


def _environment_lines(launcher: Launcher, node: Node) -> set:
    """``build-args: |`` with one ``NAME=value`` a line (a literal block, or a one-line string)."""
    start = node.body if node.body is not None else node.verbatim
    if start is None:
        return set()
    text = launcher.scan.text
    for match in re.finditer(r"(?m)^[ \t]*([A-Za-z_][A-Za-z0-9_]*)=(.*)$", text[start:node.end]):
        at = start + match.start(1)
        value = match.group(2).strip()
        _assign(launcher, match.group(1), at, Node(SCALAR, start + match.start(2), start + match.end(2), value, True,
                                                   start + match.start(2)))
    return {id(node)}


def _assign(launcher: Launcher, name: str, at: Optional[int], value: Optional[Node]) -> None:
    if at is None or not _VARIABLE.fullmatch(name):
        return
    literal = value.value if value is not None and value.kind == SCALAR else None
    runtime = literal is not None and "$" in literal
    launcher.assign(name, at, None if runtime or literal is None else literal, literal if runtime else "")
    if value is not None and value.kind == SCALAR:
        _references(launcher, launcher.scan.text, value)


def _environment_map(launcher: Launcher, node: Node) -> set:
    """``env: {NAME: value}``: each key is a variable set to its value."""
    for key, value in node.items:
        _assign(launcher, key.value, key.verbatim, value)
    return {id(v) for _, v in node.items}


def _environment_list(launcher: Launcher, node: Node) -> set:
    """``environment: [NAME=value, ...]`` (docker compose) or ``env: [{name: NAME, value: v}]`` (Kubernetes)."""
    taken = set()
    for entry in node.items:
        if entry.kind == SCALAR and "=" in entry.value and entry.verbatim is not None:
            name, _, value = entry.value.partition("=")
            at = entry.verbatim
            literal = Node(SCALAR, at + len(name) + 1, entry.end, value, True, at + len(name) + 1)
            _assign(launcher, name, at, literal)
            taken.add(id(entry))
        elif entry.kind == MAP:
            fields = {k.value: (k, v) for k, v in entry.items}
            if "name" in fields and fields["name"][1].kind == SCALAR:
                name = fields["name"][1]
                _assign(launcher, name.value, name.verbatim, fields.get("value", (None, None))[1])
                taken |= {id(v) for _, v in entry.items}
    return taken


def _shell(launcher: Launcher, key: str, node: Node, item: bool) -> bool:
    """A shell command line (``run: |``, ``command: ...``): read as a launcher's commands. Whether it was one."""
    if key not in SHELL_KEYS or (item and key not in SCRIPT_LISTS) or not node.string:
        return False
    if node.verbatim is not None:
        start, end = node.verbatim, node.verbatim + len(node.value)
    elif node.body is not None:
        start, end = node.body, node.end
    else:
        return False  # folded or escaped: its text is not the command line; its references are read
    read_shell(launcher, parse(launcher.scan.text, start, end), group="config")
    _references(launcher, launcher.scan.text, node, shell=False)  # ${{ env.NAME }} is the CI's, not the shell's
    return True


def _references(launcher: Launcher, text: str, node: Node, shell: bool = True) -> None:
    """The variables a string reads: ``$NAME``, ``${NAME}``, ``${oc.env:NAME}``, ``${{ env.NAME }}``
    (found in its text as written, so a block or escaped string's references are renamed in place)."""
    for match in _REFERENCES.finditer(text, node.start, node.end):
        group = next(g for g in ("hydra", "actions", "shell") if match.group(g))
        if shell or group != "shell":
            launcher.refer(match.group(group), match.start(group))
