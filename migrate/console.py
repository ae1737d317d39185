"""The one place human output goes: a Rich console on stderr (stdout stays for machine output)."""

from rich.console import Console

console = Console(stderr=True, highlight=False)
