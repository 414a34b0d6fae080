"""How :class:`fusesched.sdk.Client` reaches a controller: the HTTP transport beneath its API
methods, with fail-over between a leader and its standbys.

Standard library only (``http.client``, one kept-alive connection per thread). With several
controller URLs a request goes to the one that answered last; when that one cannot be reached
or answers 503 ``{"detail": "standby"}``, the next is tried, round after round, for up to
``failover_s`` seconds. A request is sent again elsewhere only when it cannot have been carried
out (no connection, or a standby's refusal) or is a read (GET): a submission must not be
doubled.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import ssl
import threading
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fusesched.client_base import (
    DEFAULT_URL,
    ControllerError,
    default_token,
    default_url,
    refusal,
    split_urls,
)

#: With several controllers, how long to wait for a connection before trying the next one.
CONNECT_TIMEOUT_S = 5.0


def path_segment(value: str) -> str:
    """``value`` (a job, task or node name) escaped as one segment of a route's path."""
    return urllib.parse.quote(value, safe="")


class _Unreachable(ConnectionError):
    """No connection could be made: the request was not sent."""


class Transport:
    """Where the controllers are, the credentials to show them, and one request's round trip
    (:meth:`_call`, :meth:`_request`); the API methods are built on it."""

    def __init__(
        self,
        url: str | Sequence[str] | None = None,
        timeout: float = 30.0,
        token: str | None = None,
        ca: str | Path | None = None,
        failover_s: float = 15.0,
    ) -> None:
        self.urls = split_urls(url or default_url()) or [DEFAULT_URL]
        self.url = self.urls[0]  # the controller requests go to (the leader, once found)
        self.timeout = timeout
        self.failover_s = failover_s
        self.token = token or default_token()
        ca = ca or os.environ.get("FUSESCHED_CA") or None
        self._ssl = ssl.create_default_context(cafile=str(ca)) if ca else None
        self._split: dict[str, urllib.parse.SplitResult] = {}
        for one in self.urls:
            try:
                parts = urllib.parse.urlsplit(one)
                parts.port  # noqa: B018 (a port that is no number raises here)
            except ValueError as exc:  # ("http://[::1": Invalid IPv6 URL)
                raise ControllerError(0, f"not a controller URL: {one!r} ({exc})") from None
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ControllerError(0, f"not a controller URL: {one!r} (http://HOST:PORT)")
            self._split[one] = parts
        self._base_path = {one: parts.path.rstrip("/") for one, parts in self._split.items()}
        self._failover = len(self.urls) > 1
        self._local = threading.local()  # one kept-alive connection per thread

    def __repr__(self) -> str:  # never shows the token
        return f"{type(self).__name__}({','.join(self.urls)!r})"

    def _call(self, method: str, path: str, body: Any = None, raw: bool = False) -> Any:
        payload, _ = self._request(method, path, body)
        return payload.decode() if raw else json.loads(payload)

    def _request(
        self, method: str, path: str, body: Any = None
    ) -> tuple[bytes, http.client.HTTPMessage]:
        """The answer's body and headers; :class:`ControllerError` for a refusal or when no
        controller answers."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"content-type": "application/json"} if data is not None else {}
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        if self._failover:
            status, payload, answer = self._exchange_any(method, path, data, headers)
        else:
            try:
                status, payload, answer = self._exchange(method, path, data, headers)
            except _Unreachable as exc:
                reason = getattr(exc, "reason", None) or exc
                raise ControllerError(
                    0, f"cannot reach the controller at {self.url}: {reason}"
                ) from None
            except (OSError, http.client.HTTPException) as exc:
                if method != "GET":
                    raise ControllerError(
                        0,
                        f"lost the controller at {self.url} during the request ({exc}); it "
                        "may or may not have been carried out",
                    ) from None
                reason = getattr(exc, "reason", None) or exc
                hint = _tls_hint(self.url, exc)
                raise ControllerError(
                    0, f"cannot reach the controller at {self.url}: {reason}{hint}"
                ) from None
        if status >= 400:
            raise ControllerError(status, refusal(payload, status))
        return payload, answer

    def _exchange_any(
        self, method: str, path: str, data: bytes | None, headers: dict[str, str]
    ) -> tuple[int, bytes, http.client.HTTPMessage]:
        """:meth:`_exchange` with the current controller, else the next ones (see the module
        docstring), for up to ``failover_s``."""
        deadline = time.monotonic() + self.failover_s
        why: dict[str, str] = {}
        while True:
            for _ in self.urls:
                url = self.url
                try:
                    status, payload, answer = self._exchange(method, path, data, headers)
                except _Unreachable as exc:
                    why[url] = f"unreachable ({exc})"
                except (OSError, http.client.HTTPException) as exc:
                    if method != "GET":  # it may have been carried out: do not repeat it
                        raise ControllerError(
                            0,
                            f"lost the controller at {url} during the request ({exc}); it may "
                            "or may not have been carried out",
                        ) from None
                    why[url] = f"unreachable ({exc}{_tls_hint(url, exc)})"
                else:
                    if status != 503 or refusal(payload, status) != "standby":
                        return status, payload, answer
                    why[url] = "standby"
                index = self.urls.index(url)
                if self.url == url:
                    self.url = self.urls[(index + 1) % len(self.urls)]
            if time.monotonic() >= deadline:
                reasons = "; ".join(f"{u}: {w}" for u, w in why.items())
                raise ControllerError(0, f"no controller leads ({reasons})")
            time.sleep(0.2)

    def _exchange(
        self, method: str, path: str, data: bytes | None, headers: dict[str, str]
    ) -> tuple[int, bytes, http.client.HTTPMessage]:
        """One request on this thread's kept-alive connection (opened on first use).

        A connection the controller closed while it sat idle is noticed when it is used, before
        any answer: a ``GET`` is then sent once more on a fresh connection. Anything else is
        sent only on a connection seen to be open just before, and never twice: a connection
        lost after it was sent may have been carried out (a submission must not be doubled).
        """
        url = self.url
        target = self._base_path[url] + path
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.conn_url != url:  # moved to another controller
            conn.close()
            conn = None
        if conn is not None and method != "GET" and _peer_closed(conn):
            conn.close()
            conn = None
        for attempt in (0, 1):
            fresh = conn is None
            if conn is None:
                conn = self._connect(url)
                self._local.conn, self._local.conn_url = conn, url
            try:
                conn.request(method, target, body=data, headers=headers)
                response = conn.getresponse()
                payload = response.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                conn.close()
                self._local.conn = conn = None
                if fresh or attempt or method != "GET":
                    raise
                continue
            except BaseException:
                conn.close()
                self._local.conn = None
                raise
            if response.will_close:
                conn.close()
                self._local.conn = None
            return response.status, payload, response.headers
        raise AssertionError("unreachable")  # pragma: no cover

    def _connect(self, url: str) -> http.client.HTTPConnection:
        """A connected connection to ``url``; :class:`_Unreachable` if none can be made."""
        parts = self._split[url]
        conn: http.client.HTTPConnection
        if parts.scheme == "https":
            conn = http.client.HTTPSConnection(
                parts.hostname or "127.0.0.1", parts.port, timeout=self.timeout, context=self._ssl
            )
        else:
            conn = http.client.HTTPConnection(
                parts.hostname or "127.0.0.1", parts.port, timeout=self.timeout
            )
        if self._failover:  # a vanished host should not hold up the move to the next one
            conn.timeout = min(self.timeout, CONNECT_TIMEOUT_S)
        try:
            conn.connect()
            if conn.sock is not None:
                conn.sock.settimeout(self.timeout)
        except OSError as exc:
            conn.close()
            raise _Unreachable(str(exc)) from exc
        return conn


def _peer_closed(conn: http.client.HTTPConnection) -> bool:
    """Whether an idle kept-alive connection was closed by the other end (it is readable:
    end of file, or bytes nobody asked for)."""
    sock = conn.sock
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def _tls_hint(url: str, exc: BaseException) -> str:
    """A hint when a plain-HTTP request met what looks like a TLS server: it hangs up at once
    (or answers bytes that are no HTTP status line)."""
    hung_up = (http.client.RemoteDisconnected, http.client.BadStatusLine, ConnectionResetError)
    if url.startswith("http://") and isinstance(exc, hung_up):
        return "; if the controller serves TLS, use https://"
    return ""
