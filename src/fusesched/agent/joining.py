"""How an agent comes to talk to its controllers: the controller URLs it is given, checked
before anything is sent, and its own credential, obtained once with a one-time join token and
kept in its work dir (mode 0600) across restarts. See docs/DEPLOY.md and docs/LIVE.md."""

from __future__ import annotations

import os
import ssl
import stat
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

import httpx

from fusesched.sdk import split_urls

#: The agent's own credential, in its work dir (mode 0600), kept across restarts.
CREDENTIAL_FILE = "agent.token"


class JoinError(RuntimeError):
    """The controller refused to let this node join."""


def join(
    controller: str,
    node: str,
    join_token: str,
    verify: ssl.SSLContext | bool = True,
    timeout: float = 30.0,
) -> str:
    """Exchange a one-time join token for this node's own credential."""
    response = httpx.post(
        f"{controller.rstrip('/')}/v1/agents/join",
        json={"node": node},
        headers={"authorization": f"Bearer {join_token}"},
        verify=verify,
        timeout=timeout,
    )
    if response.status_code != 201:
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        raise JoinError(f"node {node!r} could not join: HTTP {response.status_code}: {detail}")
    return str(response.json()["token"])


def credential(
    controller: str,
    node: str,
    work_dir: Path,
    join_token: str | None,
    verify: ssl.SSLContext | bool = True,
) -> str | None:
    """The node's credential: the one stored in ``work_dir`` (from an earlier join), else a
    new one obtained with ``join_token`` and stored there (mode 0600), else ``None`` (a
    controller without authentication)."""
    path = work_dir / CREDENTIAL_FILE
    if os.path.lexists(path):
        return _read_own(path).strip() or None
    if join_token is None:
        return None
    token = join(controller, node, join_token, verify)
    if token:
        work_dir.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW  # never one planted there
        fd = os.open(path, flags, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
    return token or None


def _read_own(path: Path) -> str:
    """The text of ``path`` if it is a regular file of the agent's own uid that only it can
    read; ``OSError`` for a link, a FIFO (never waited on) or a file someone else put there."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "r") as handle:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise OSError(f"{path} is not the agent's own private file (mode 0600)")
        return handle.read()


def controller_urls(controllers: str | Sequence[str]) -> list[str]:
    """The controller URLs in ``controllers``: one URL, a comma-separated list, or a sequence
    of either (a leader and its standbys, see docs/LIVE.md). Order is kept, repeats dropped.

    ``ValueError`` for none, or for one that is not ``http(s)://HOST[:PORT]`` (a path after it
    is kept): retrying could never reach it."""
    urls = split_urls(controllers)
    if not urls:
        raise ValueError("no controller URL given")
    for url in urls:
        parts = urllib.parse.urlsplit(url)
        try:
            port_ok = parts.port is None or parts.port > 0
        except ValueError:  # not a number, or outside 0..65535
            port_ok = False
        if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
            raise ValueError(
                f"not a controller URL: {url!r} (give http://HOST:PORT or https://HOST:PORT)"
            )
    return urls
