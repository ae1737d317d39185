"""The two places human output goes, as in ruff: ``out`` (stdout) for a command's primary output
(the run summary, the ``--check`` lists, ``explain``, ``ops``, the demo's story), ``console``
(stderr) for progress and diagnostics (errors, warnings), so ``migrate explain NPU302 | less``
and ``migrate ops list | grep`` read the output, and machine formats keep stdout to themselves.

Neither wraps lines (``soft_wrap``): a ``path:line:col: problem`` line stays one line in a pipe or
a narrow terminal. No emoji codes (a site ``train.py:100:8`` must not print as a "100" emoji) and
no highlighting.
"""

from rich.console import Console

console = Console(stderr=True, highlight=False, emoji=False, soft_wrap=True)
out = Console(highlight=False, emoji=False, soft_wrap=True)

