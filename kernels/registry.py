"""Registry of the emulated torch_npu ops.

Each kernel module decorates its public functions with ``@npu_op``; the emulated ``torch_npu``
module and the schema conformance test read ``OPS``. ``load_all`` imports every module of the
package once so that the registry is complete without a hand-kept list.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Callable, Dict

OPS: Dict[str, Callable] = {}


def npu_op(fn: Callable) -> Callable:
    """Register ``fn`` under its own name (which must be the real torch_npu name)."""
    if fn.__name__ in OPS:
        raise RuntimeError(f"emulated op {fn.__name__} registered twice")
    OPS[fn.__name__] = fn
    return fn


_loaded = False


def load_all() -> Dict[str, Callable]:
    global _loaded
    if not _loaded:
        from npu_migrate import kernels

        for info in pkgutil.iter_modules(kernels.__path__):
            if not info.name.startswith("_"):
                importlib.import_module(f"npu_migrate.kernels.{info.name}")
        _loaded = True
    return OPS
