"""The `backthink` command line: typer commands, one module per group; each parses, calls, prints.

Nothing else in the package imports this room.
"""

from backthink.cli.root import app, main

__all__ = ["app", "main"]
