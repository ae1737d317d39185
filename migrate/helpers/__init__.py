"""The helper module that fused rewrites vendor into the migrated repo (written, never imported here),
and how this tool recognises it. Its sources are ``glue/`` (``sections``), joined per directory into
the sections its migrated files call (``assemble``)."""

HELPER = "npu_glue"  # the vendored helper module, <dir>/npu_glue.py

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
