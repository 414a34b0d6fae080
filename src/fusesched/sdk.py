"""The Python SDK: talk to a fusesched controller from a program or a notebook.

    from fusesched.sdk import Client
    client = Client()                      # FUSESCHED_CONTROLLER, else http://127.0.0.1:8642
    job = client.submit({"name": "hello", "groups": [{"resources": {"cpu": 1},
                                                       "argv": ["echo", "hi"]}]})
    client.wait(job)["state"]              # "Completed"
    print(client.logs(job))

It uses only the standard library (``http.client``, one kept-alive connection per thread),
so importing it is quick: the CLI is built on it and a submission does not pay for an HTTP
framework's start-up.

A controller with authentication wants a token: ``Client(url, token=...)``, else the
``FUSESCHED_TOKEN`` variable, else the file ``~/.config/fusesched/token``. A controller that
speaks TLS with the cluster's own CA: ``Client("https://...", ca="ca.crt")`` (or
``FUSESCHED_CA``).
"""

from __future__ import annotations

import getpass
import http.client
import json
import os
import ssl
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8642"
FINISHED = frozenset({"Completed", "Failed", "Cancelled"})


class ControllerError(RuntimeError):
    """The controller refused a request (``status`` is the HTTP status, 0 if unreachable)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def default_url() -> str:
    return os.environ.get("FUSESCHED_CONTROLLER", DEFAULT_URL)


def token_file() -> Path:
    """``$XDG_CONFIG_HOME/fusesched/token`` (``~/.config/fusesched/token``)."""
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "fusesched" / "token"


def default_token() -> str | None:
    """``FUSESCHED_TOKEN``, else the token file's content, else ``None``."""
    token = os.environ.get("FUSESCHED_TOKEN")
    if token:
        return token.strip()
    try:
        return token_file().read_text().strip() or None
    except OSError:
        return None


class Client:
    def __init__(
        self,
        url: str | None = None,
        timeout: float = 30.0,
        token: str | None = None,
        ca: str | Path | None = None,
    ) -> None:
        self.url = (url or default_url()).rstrip("/")
        self.timeout = timeout
        self.token = token or default_token()
        ca = ca or os.environ.get("FUSESCHED_CA") or None
        self._ssl = ssl.create_default_context(cafile=str(ca)) if ca else None
        self._parts = urllib.parse.urlsplit(self.url)
        if self._parts.scheme not in ("http", "https") or not self._parts.hostname:
            raise ControllerError(0, f"not a controller URL: {self.url!r} (http://HOST:PORT)")
        self._base_path = self._parts.path.rstrip("/")
        self._local = threading.local()  # one kept-alive connection per thread

    def __repr__(self) -> str:  # never shows the token
        return f"Client({self.url!r})"

    # ------------------------------------------------------------------ jobs

    def submit(self, request: Mapping[str, Any]) -> str:
        """Submit one job (a JobRequest as a dict); returns its id.

        A request that names no ``user`` is submitted as the user running this program, or,
        with a token, as the token's user.
        """
        return str(self._call("POST", "/v1/jobs", self._with_user(request))["id"])

    def submit_many(self, requests: Sequence[Mapping[str, Any]]) -> list[str]:
        """Submit several jobs in one request (all or none are accepted)."""
        body = [self._with_user(r) for r in requests]
        return [str(i) for i in self._call("POST", "/v1/jobs/batch", body)["ids"]]

    def submit_files(self, files: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Submit the jobs in submission files, parsed by the controller: each file is
        ``{"name": "job.sh", "text": "...", "args": [sbatch options]}``. Returns
        ``{"ids": [...], "warnings": [...]}``."""
        body: dict[str, Any] = {"files": list(files)}
        if not self.token:
            body["user"] = getpass.getuser()
        return dict(self._call("POST", "/v1/submissions", body))

    def show(self, job_id: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/v1/jobs/{_quote(job_id)}"))

    def jobs(
        self,
        user: str | None = None,
        states: Sequence[str] = (),
        queue: str | None = None,
        limit: int = 50,
    ) -> list[dict[str, Any]]:
        query: list[tuple[str, str]] = [("limit", str(limit))]
        if user:
            query.append(("user", user))
        if queue:
            query.append(("queue", queue))
        query.extend(("state", s) for s in states)
        return list(self._call("GET", "/v1/jobs?" + urllib.parse.urlencode(query)))

    def cancel(self, job_id: str) -> list[str]:
        return list(self._call("POST", f"/v1/jobs/{_quote(job_id)}/cancel", {})["cancelled"])

    def logs(self, job_id: str, task: str | None = None, offset: int = 0) -> str:
        query = {"offset": str(offset)} | ({"task": task} if task else {})
        path = f"/v1/jobs/{_quote(job_id)}/logs?" + urllib.parse.urlencode(query)
        return str(self._call("GET", path, raw=True))

    def wait(
        self, job_id: str, timeout: float | None = None, poll_s: float = 0.1
    ) -> dict[str, Any]:
        """Block until the job has finished; returns its final record."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.show(job_id)
            if job["state"] in FINISHED:
                return job
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {job['state']} after {timeout} s")
            time.sleep(poll_s)

    # ------------------------------------------------------------------ cluster

    def nodes(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/v1/nodes"))

    def queues(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/v1/queues"))

    def usage(
        self,
        start: str | float = "-30d",
        end: str | float = "now",
        by: Sequence[str] = ("tenant", "user"),
        tenant: str | None = None,
        user: str | None = None,
    ) -> dict[str, Any]:
        """Usage over a window (``GET /v1/usage``): times as epoch seconds, ISO dates or
        times, ``now`` or ``-7d``; ``by`` any of tenant, user, queue. Returns ``{"rows":
        [...], "total": {...}, ...}`` with CPU-hours, GPU-hours by model, estimated kWh."""
        query = {"start": str(start), "end": str(end), "by": ",".join(by)}
        query |= ({"tenant": tenant} if tenant else {}) | ({"user": user} if user else {})
        return dict(self._call("GET", "/v1/usage?" + urllib.parse.urlencode(query)))

    def priority(self, job_id: str) -> dict[str, Any]:
        """A waiting job's multifactor priority, factor by factor."""
        return dict(self._call("GET", f"/v1/jobs/{_quote(job_id)}/priority"))

    def health(self) -> dict[str, Any]:
        return dict(self._call("GET", "/healthz"))

    # ------------------------------------------------------------------ tokens (admins)

    def create_token(
        self,
        user: str = "",
        *,
        tenant: str = "",
        role: str = "user",
        kind: str = "user",
        node: str | None = None,
        expires_in_s: float | None = None,
    ) -> dict[str, Any]:
        """Make a token; the answer's ``token`` is shown this once (only its hash is kept)."""
        body: dict[str, Any] = {"kind": kind, "user": user, "tenant": tenant, "role": role}
        if node is not None:
            body["node"] = node
        if expires_in_s is not None:
            body["expires_in_s"] = expires_in_s
        return dict(self._call("POST", "/v1/tokens", body))

    def tokens(self, kind: str | None = None, include_revoked: bool = False) -> list[Any]:
        query = {"include_revoked": str(include_revoked).lower()} | ({"kind": kind} if kind else {})
        return list(self._call("GET", "/v1/tokens?" + urllib.parse.urlencode(query)))

    def revoke_token(self, token_id: str) -> str:
        return str(self._call("DELETE", f"/v1/tokens/{_quote(token_id)}")["revoked"])

    # ------------------------------------------------------------------ transport

    def _call(self, method: str, path: str, body: Any = None, raw: bool = False) -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"content-type": "application/json"} if data is not None else {}
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        try:
            status, payload = self._exchange(method, path, data, headers)
        except (OSError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise ControllerError(
                0, f"cannot reach the controller at {self.url}: {reason}"
            ) from None
        if status >= 400:
            raise ControllerError(status, _detail(payload, status))
        return payload.decode() if raw else json.loads(payload)

    def _exchange(
        self, method: str, path: str, data: bytes | None, headers: dict[str, str]
    ) -> tuple[int, bytes]:
        """One request on this thread's kept-alive connection (opened on first use).

        A connection the controller closed while it sat idle is noticed when it is used, before
        any answer: the request is then sent once more on a fresh connection.
        """
        target = self._base_path + path
        conn = getattr(self._local, "conn", None)
        for attempt in (0, 1):
            fresh = conn is None
            if conn is None:
                conn = self._connect()
                self._local.conn = conn
            try:
                conn.request(method, target, body=data, headers=headers)
                response = conn.getresponse()
                payload = response.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                conn.close()
                self._local.conn = conn = None
                if fresh or attempt:
                    raise
                continue
            except BaseException:
                conn.close()
                self._local.conn = None
                raise
            if response.will_close:
                conn.close()
                self._local.conn = None
            return response.status, payload
        raise AssertionError("unreachable")  # pragma: no cover

    def _connect(self) -> http.client.HTTPConnection:
        if self._parts.scheme == "https":
            return http.client.HTTPSConnection(
                self._parts.hostname or "127.0.0.1",
                self._parts.port,
                timeout=self.timeout,
                context=self._ssl,
            )
        return http.client.HTTPConnection(
            self._parts.hostname or "127.0.0.1", self._parts.port, timeout=self.timeout
        )

    def _with_user(self, request: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(request)
        if not out.get("user") and not self.token:  # with a token, the controller knows
            out["user"] = getpass.getuser()
        return out


def _quote(job_id: str) -> str:
    return urllib.parse.quote(job_id, safe="")


def _detail(payload: bytes, status: int) -> str:
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
