"""The host a job was submitted from, Slurm's ``SLURM_SUBMIT_HOST``: the submitting clients
(``fusesched sbatch``, ``submit``, ``run``, the native front, the SDK) send their own host
name (:func:`this_host`) as a request's or a submission file's ``submit_host``; the
controller checks it against :data:`SUBMIT_HOST_PATTERN`. A job submitted without one (the
REST API, the portal, an older client) has none, and its tasks get no ``SLURM_SUBMIT_HOST``.
"""

from __future__ import annotations

import re
import socket
from typing import Final

#: What a submit host may be: a host name's letters, digits, dots, hyphens and underscores,
#: at most 255 characters, starting with a letter or digit (the native front checks the same:
#: src/fusesched/cli/front.c).
SUBMIT_HOST_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$"
_HOST_RE: Final = re.compile(SUBMIT_HOST_PATTERN)


def this_host() -> str | None:
    """This machine's host name as Slurm's sbatch says it (``gethostname``), or None when it
    is not one :data:`SUBMIT_HOST_PATTERN` takes (then nothing is sent)."""
    try:
        name = socket.gethostname()
    except OSError:
        return None
    return name if _HOST_RE.fullmatch(name) else None
