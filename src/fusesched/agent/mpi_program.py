"""The libraries a step's program needs, read from its file (``srun`` tells an MPI program
by them: :mod:`fusesched.agent.step_mpi`): the program found as ``srun``'s ``PATH`` and
working directory find it, its ELF dynamic section read by :mod:`fusesched.agent.elf`
through a map of the file, never more than :data:`ELF_MAX_BYTES` of it."""

from __future__ import annotations

import mmap
import os
import shutil

from fusesched.agent.elf import ElfError, needed_libraries

#: A program bigger than this is not looked into for libmpi.
ELF_MAX_BYTES = 1 << 30


def program_libraries(name: str, path: str, cwd: str) -> list[str]:
    """The libraries the program ``name`` needs (a name with a slash from ``cwd``, else on
    ``path``); none when it is not found or cannot be read as an ELF program."""
    program = _program(name, path, cwd)
    return [] if program is None else _needed(program)


def _program(name: str, path: str, cwd: str) -> str | None:
    """Where the command's program is (a name with a slash from ``cwd``, else on ``path``)."""
    if "/" in name:
        found = os.path.join(cwd, name)
        return found if os.path.isfile(found) else None
    return shutil.which(name, path=path)


def _needed(program: str) -> list[str]:
    """The libraries ``program`` needs (none when it cannot be read as an ELF program)."""
    try:
        with open(program, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if not 0 < size <= ELF_MAX_BYTES:
                return []
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return needed_libraries(data)
    except (OSError, ValueError, ElfError):
        return []
