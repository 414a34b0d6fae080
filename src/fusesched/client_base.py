"""What every client of a controller shares, importable in a few milliseconds (standard
library ``os`` and ``json`` only): where the controller is, which token to send, the error a
refusal becomes and how it reads. :mod:`fusesched.sdk` builds the full client on it, and the
CLI's quick path (:mod:`fusesched.cli.fast`) its one-request submission.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

DEFAULT_URL = "http://127.0.0.1:8642"

#: The log route's answer header: the byte offset to ask for next (its text's length in bytes
#: is not: bytes that are not UTF-8 come as U+FFFD, a character half written is held back).
NEXT_OFFSET = "X-Next-Offset"
#: Its headers saying whether the log is complete: ``true`` when the text reaches the end of
#: the log and nothing more will be written to it (``false`` otherwise); and whether its agent
#: confirmed where it ends (``false`` with a complete log: the end of the output may be
#: missing). A controller older than them sends neither.
LOG_COMPLETE = "X-Log-Complete"
LOG_CONFIRMED = "X-Log-Confirmed"
#: Its header saying that the text stops short of what is written (its ``max_bytes``, 4 MiB by
#: default): ``true`` asks for the next offset at once. A controller older than it sends none
#: (it sends all there is).
LOG_MORE = "X-Log-More"


class ControllerError(RuntimeError):
    """The controller refused a request (``status`` is the HTTP status, 0 if unreachable)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def older_than(exc: ControllerError, field: str) -> bool:
    """Whether ``exc`` is a controller older than the request field ``field`` refusing it
    (422, ``field: Extra inputs are not permitted``: nothing was done)."""
    return exc.status == 422 and f"{field}: Extra" in str(exc)


def default_url() -> str:
    return os.environ.get("FUSESCHED_CONTROLLER", DEFAULT_URL)


def token_file() -> str:
    """``$XDG_CONFIG_HOME/fusesched/token`` (``~/.config/fusesched/token``)."""
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(config, "fusesched", "token")


def default_token() -> str | None:
    """``FUSESCHED_TOKEN``, else the token file's content, else (inside a job's task) the
    job's own ``FUSESCHED_JOB_TOKEN``, else ``None``. The user's token comes before the job's
    credential, which the controller takes only for the job's own steps and launches: a
    batch script's ``squeue``, ``sacct`` or ``sbatch`` of its successor speak as the user."""
    token = os.environ.get("FUSESCHED_TOKEN")
    if token and token.strip():
        return token.strip()
    try:
        with open(token_file(), encoding="utf-8") as handle:
            token = handle.read().strip()
    except (OSError, UnicodeDecodeError):
        token = ""
    return token or os.environ.get("FUSESCHED_JOB_TOKEN", "").strip() or None


def split_urls(urls: str | Sequence[str]) -> list[str]:
    """Controller URLs from one URL, URLs separated by commas, or a sequence of either."""
    items = [urls] if isinstance(urls, str) else list(urls)
    out: list[str] = []
    for item in items:
        for part in item.split(","):
            url = part.strip().rstrip("/")
            if url and url not in out:
                out.append(url)
    return out


def refusal(payload: bytes, status: int) -> str:
    """The controller's reason for refusing, made readable (FastAPI's 422 lists fields)."""
    try:
        detail = json.loads(payload).get("detail", payload.decode())
    except (ValueError, AttributeError):
        return f"HTTP {status}: {payload.decode(errors='replace')[:500]}"
    if isinstance(detail, list):  # pydantic validation errors
        parts = []
        for item in detail:
            loc = ".".join(str(x) for x in item.get("loc", ()) if x != "body")
            parts.append(f"{loc}: {item.get('msg', item)}" if loc else str(item.get("msg")))
        return "invalid request: " + "; ".join(parts)
    return str(detail)
