"""Real servers on the loopback for the notification tests: an SMTP server (aiosmtpd) that
keeps the mails it gets, and an HTTP server (the standard library's) that keeps the JSON
posted to it and answers with a status the test chooses."""

from __future__ import annotations

import email
import email.policy
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class MailBox:
    """What the SMTP server received: each mail parsed, with its envelope's recipients."""

    def __init__(self) -> None:
        self.mails: list[EmailMessage] = []
        self.recipients: list[list[str]] = []
        self._changed = threading.Condition()

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        content = envelope.original_content or b""
        message = email.message_from_bytes(content, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        with self._changed:
            self.mails.append(message)
            self.recipients.append(list(envelope.rcpt_tos))
            self._changed.notify_all()
        return "250 OK"

    def wait(self, count: int, timeout: float = 20.0) -> list[EmailMessage]:
        """The first ``count`` mails, once they are here (AssertionError after ``timeout``)."""
        with self._changed:
            got = self._changed.wait_for(lambda: len(self.mails) >= count, timeout)
            subjects = [str(m["Subject"]) for m in self.mails]
            assert got, f"{count} mail(s) expected within {timeout} s, got {subjects}"
            return list(self.mails[:count])

    def subjects(self) -> list[str]:
        with self._changed:
            return [str(m["Subject"]) for m in self.mails]


@contextmanager
def smtp_server() -> Iterator[tuple[MailBox, int]]:
    """An SMTP server on 127.0.0.1: (its mailbox, its port)."""
    box = MailBox()
    port = free_port()
    server = Controller(box, hostname="127.0.0.1", port=port)
    server.start()
    try:
        yield box, port
    finally:
        server.stop()


@contextmanager
def closed_port() -> Iterator[int]:
    """A loopback port where nothing listens (held bound, so that nothing else takes it)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    try:
        yield int(sock.getsockname()[1])
    finally:
        sock.close()


class HookBox:
    """The JSON objects POSTed to the HTTP server, and the status it answers with."""

    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []
        self.status = 200
        self.lock = threading.Lock()

    def wait(self, count: int, timeout: float = 20.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.posts) >= count:
                    return list(self.posts[:count])
            time.sleep(0.02)
        raise AssertionError(f"{count} post(s) expected within {timeout} s, got {self.posts}")


@contextmanager
def hook_server() -> Iterator[tuple[HookBox, str]]:
    """An HTTP server on 127.0.0.1 that keeps JSON POSTs: (its box, its URL)."""
    box = HookBox()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            data = json.loads(self.rfile.read(length))
            with box.lock:
                box.posts.append(data)
                status = box.status
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield box, f"http://127.0.0.1:{server.server_address[1]}/hook"
    finally:
        server.shutdown()
        server.server_close()
