"""Helper modules that fused rewrites vendor into the migrated repo (copied, never imported here),
and how this tool recognises the one it vendors."""

HELPER = "npu_glue"  # the vendored helper module (migrate/helpers/npu_glue.py)

#: how a migrated file imports a module vendored beside it (``migrate.imports`` explains the form)
BESIDE = (
    "try:\n"
    "    from .{0} import {0}\n"
    "except ImportError:  # not loaded as part of a package: a script, or a module on sys.path\n"
    "    import {0}\n"
)


def is_helper_file(path: str) -> bool:
    """The helper module this tool vendors (its fallbacks call the original APIs on purpose)."""
    return path.replace("\\", "/").rsplit("/", 1)[-1] == f"{HELPER}.py"
