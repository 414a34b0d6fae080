"""The pseudo-terminal of a ``fusesched run --pty`` job (Slurm's ``srun --pty``): its task
runs with a terminal as its standard input, output and error, and as its controlling
terminal (docs/SUBMIT.md, "Interactive jobs"). The job request's ``pty`` and the agent's
launch carry the client's terminal type and window size."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from fusesched.submit.strict_model import StrictModel

#: The most rows or columns a window may have (a terminal's size fits 16 bits).
MAX_SIDE = 10000


class Terminal(StrictModel):
    """The client's terminal: ``TERM`` (a terminfo name) and the window's size."""

    term: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")] = "dumb"
    rows: Annotated[int, Field(ge=1, le=MAX_SIDE)] = 24
    cols: Annotated[int, Field(ge=1, le=MAX_SIDE)] = 80
