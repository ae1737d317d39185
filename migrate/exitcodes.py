"""Exit codes of the ``migrate`` command: a bitmask, so one run can report several outcomes.

1 and 2 keep their usual meanings (an unexpected crash, a usage error reported by the CLI parser);
the other bits combine: ``--check`` on a tree with changes and file errors exits 4 | 16 = 20.
"""

OK = 0
INTERNAL_ERROR = 1  # a bug in npu-migrate: the traceback is printed
USAGE_ERROR = 2  # bad command-line arguments
WOULD_CHANGE = 4  # --check: at least one file would change
UNSUPPORTED = 8  # --check: at least one site is reported as not migratable
FILE_ERRORS = 16  # at least one file could not be processed (parse error, not UTF-8, rule crash)
CONFIG_ERROR = 32  # invalid op table or spec, refused --in-place, missing paths
PARITY_FAILED = 64  # migrate parity: at least one case did not pass
NOT_PROVEN = 128  # migrate parity: a numerics-changing site's fused path ran in no run (never with 2: not 130)
INTERRUPTED = 130  # stopped by Ctrl-C (SIGINT) or SIGTERM, the shell's convention; not a bit

DESCRIPTIONS = {
    OK: "success",
    INTERNAL_ERROR: "internal error in npu-migrate (please report it with the traceback)",
    USAGE_ERROR: "bad command-line usage",
    WOULD_CHANGE: "--check: files would change",
    UNSUPPORTED: "--check: sites that cannot be migrated were reported",
    FILE_ERRORS: "some files could not be processed (see the report)",
    CONFIG_ERROR: "invalid configuration: op table, parity spec, paths or a refused --in-place",
    PARITY_FAILED: "parity: at least one case failed",
    NOT_PROVEN: "parity: the fused path of a numerics-changing site ran in no run (not proven)",
    INTERRUPTED: "interrupted by Ctrl-C or SIGTERM (the report says what was written)",
}
