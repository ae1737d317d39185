"""The vendored helper with every section, assembled once per test session into a temporary
directory: ``HELPERS``, the directory to put on ``sys.path`` for ``import npu_glue``, and ``GLUE``,
the file (where the helper's code objects say they come from: ``OpCounter([GLUE])``). The tests of
the helper's functions and of the fused rules run against it; a migrated tree holds only the
sections its files call (tests/helpers/test_glue_sections.py)."""

import atexit
import shutil
import tempfile
from pathlib import Path

from npu_migrate.migrate.helpers import HELPER
from npu_migrate.migrate.helpers.assemble import assemble
from npu_migrate.migrate.helpers.sections import sections


def _assembled() -> Path:
    directory = Path(tempfile.mkdtemp(prefix=f"{HELPER}-"))
    atexit.register(shutil.rmtree, directory, True)
    (directory / f"{HELPER}.py").write_text(assemble(sections()), encoding="utf-8")
    return directory


HELPERS = _assembled()
GLUE = HELPERS / f"{HELPER}.py"
