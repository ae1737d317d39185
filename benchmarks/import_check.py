"""Import every module of a tree in one process and print, as JSON, ``{module: error or null}``.

Run by ``real_repos.py`` once per side: the original tree under ``kernels.emulate_cuda()`` (its CUDA
calls run on the CPU) and the migrated tree under ``kernels.emulate()`` (the emulated NPU), so a
module that imports in the original but not in the migrated tree is a migration that broke it.

``python benchmarks/import_check.py SIDE ROOT PACKAGE`` imports ``PACKAGE.*`` found under
``ROOT/PACKAGE``; ``python benchmarks/import_check.py SIDE TREE --transformers`` loads each
``models/<family>/modeling_*.py`` of TREE as a submodule of the installed ``transformers``
package (so its relative imports resolve there), with the tree's ``npu_glue.py`` beside it.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import traceback
import warnings
from pathlib import Path


def _error(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()[-1][:300]


def package_modules(root: Path, package: str):
    for path in sorted((root / package).rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if any(p.startswith(".") or "-" in p for p in parts):
            continue
        yield ".".join(parts)


def check_package(root: Path, package: str) -> dict:
    sys.path.insert(0, str(root))
    results = {}
    for name in package_modules(root, package):
        try:
            importlib.import_module(name)
            results[name] = None
        except BaseException as exc:  # noqa: BLE001 - any failure of user code at import time
            results[name] = _error(exc)
    return results


def _load(name: str, path: Path, package: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = package
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def check_transformers(tree: Path, migrated: bool) -> dict:
    results = {}
    for path in sorted((tree / "models").glob("*/modeling_*.py")):
        family, stem = path.parent.name, path.stem
        package = f"transformers.models.{family}"
        name = f"{package}.{stem}"
        try:
            if migrated:
                importlib.import_module(package)
                glue = path.parent / "npu_glue.py"
                if glue.is_file():
                    _load(f"{package}.npu_glue", glue, package)
                _load(f"{package}.npu_checked_{stem}", path, package)
            else:
                importlib.import_module(name)
            results[name] = None
        except BaseException as exc:  # noqa: BLE001
            results[name] = _error(exc)
    return results


def main() -> None:
    side, root = sys.argv[1], Path(sys.argv[2])
    warnings.simplefilter("ignore")
    from npu_migrate import kernels

    with (kernels.emulate() if side == "migrated" else kernels.emulate_cuda()):
        if sys.argv[3] == "--transformers":
            results = check_transformers(root, side == "migrated")
        else:
            results = check_package(root, sys.argv[3])
    sys.stdout.write("\n@@RESULTS@@" + json.dumps(results))


if __name__ == "__main__":
    main()
