"""The CLI's Rich consoles.

Rich lays a table out for an 80-column screen when its output is not a terminal, so
``fusesched jobs | grep`` or ``> file`` cut names, queues and node lists to ``defa…``. Piped or
redirected, the CLI's consoles are wide instead (``COLUMNS`` still wins when set), so tables
come out whole, as ``squeue``'s do.
"""

from __future__ import annotations

import os
import sys

from rich.console import Console

#: Width of a console whose output is not a terminal (tables take only what they need).
PIPED_WIDTH = 400


def make_console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    piped = not stream.isatty() and not os.environ.get("COLUMNS")
    return Console(stderr=stderr, width=PIPED_WIDTH if piped else None)
