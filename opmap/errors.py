"""The op table's one error type, declared without YAML: the records (``Fallback`` in every finding)
and the YAML readers both raise it, and a run whose results are all cached imports neither the
table nor PyYAML."""

from __future__ import annotations

from pathlib import Path


class SchemaError(ValueError):
    """A problem in a user-editable YAML file, located to a line."""

    def __init__(self, path: Path | str, line: int, problem: str):
        self.path, self.line, self.problem = str(path), line, problem
        super().__init__(f"{path}:{line}: {problem}")
