"""The operator table: YAML records describing what each torch API, declared package and launcher
setting becomes on an NPU.

Its names are loaded from their modules when first asked for (PEP 562): a run whose results are all
cached reads findings' fallback plans (``Fallback``) but never the table, nor PyYAML."""

from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, List

_HOMES = {
    "EnvironmentRecord": "environment",
    "IndexRecord": "packages", "PackageRecord": "packages",
    "PLANS": "records", "STATUSES": "records", "Fallback": "records", "NamedPlan": "records", "OpRecord": "records",
    "Tolerance": "records", "plan": "plans",
    "OpTable": "table", "load_file": "table", "load_sections": "table", "load_table": "table",
    "SchemaError": "records",
}
__all__ = sorted(_HOMES)

if TYPE_CHECKING:  # the names, for type checkers
    from .environment import EnvironmentRecord  # noqa: F401
    from .packages import IndexRecord, PackageRecord  # noqa: F401
    from .plans import plan  # noqa: F401
    from .records import PLANS, STATUSES, Fallback, NamedPlan, OpRecord, SchemaError, Tolerance  # noqa: F401
    from .table import OpTable, load_file, load_sections, load_table  # noqa: F401


BUILTIN_DIR = Path(__file__).parent


def builtin_files() -> List[Path]:
    """The built-in op-table files (their bytes are part of the result cache's key)."""
    return sorted(BUILTIN_DIR.glob("*.yaml"))


def is_builtin(path: Path) -> bool:
    """Whether ``path`` is one of the op-table files shipped with the tool."""
    return Path(path).resolve().parent == BUILTIN_DIR.resolve()


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value
    return value
