"""The one place human output goes: a Rich console on stderr (stdout stays for machine output).

No emoji codes (a site ``train.py:100:8`` must not print as a "100" emoji) and no highlighting.
"""

from rich.console import Console

console = Console(stderr=True, highlight=False, emoji=False)
