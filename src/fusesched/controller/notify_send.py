"""Sending job event notifications: the transports (mail over SMTP with the standard
library, a webhook that gets a JSON POST through httpx), their settings
(:class:`NotifyConfig`, the controller's ``--smtp``/``--notify-webhook`` options) and
:class:`Delivery`, which sends one transport's notices on its own thread.

Delivery never blocks or stops the controller: a notice goes into a bounded queue (a full
queue drops it, counted), a background thread sends it, trying again after a failure a few
times with a growing pause, and then gives up, logged and counted. Nothing is kept across
a controller restart.
"""

from __future__ import annotations

import contextlib
import email.policy
import logging
import queue
import smtplib
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Final, Protocol
from urllib.parse import urlsplit

import httpx

from fusesched.controller.notify_text import Notice, body, payload, subject
from fusesched.submit.job_notify import mail_address

log = logging.getLogger("fusesched.notify")

#: the environment variable that holds the SMTP login's password (never an option: it would
#: show in the process list)
PASSWORD_ENV: Final = "FUSESCHED_SMTP_PASSWORD"
DEFAULT_SMTP_PORT: Final = 25
#: CRLF lines, headers folded only past RFC 5322's limit (the standard policy folds a long
#: subject onto a continuation line, which readers then show with a leading space)
_MAIL_POLICY: Final = email.policy.SMTP.clone(max_line_length=998)


def parse_host_port(text: str, default_port: int = DEFAULT_SMTP_PORT) -> tuple[str, int]:
    """``host``, ``host:port`` or ``[v6]:port`` as (host, port); ``ValueError`` otherwise."""
    value = text.strip()
    host, port_text = value, ""
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        if rest and not rest.startswith(":"):
            raise ValueError(f"cannot read {text!r}: give HOST:PORT, e.g. mail.example.org:25")
        port_text = rest[1:]
    elif value.count(":") == 1:
        host, port_text = value.split(":")
    if not host or any(ch.isspace() or ch in "/@" for ch in host):
        raise ValueError(f"cannot read {text!r}: give HOST:PORT, e.g. mail.example.org:25")
    if not port_text:
        return host, default_port
    if not (port_text.isascii() and port_text.isdigit()) or not 0 < int(port_text) < 65536:
        raise ValueError(f"the port in {text!r} must be a number from 1 to 65535")
    return host, int(port_text)


@dataclass(frozen=True)
class NotifyConfig:
    """How a controller sends job notifications (docs/LIVE.md, "Job event notifications").

    ``smtp``: ``host[:port]`` of the mail server (None: no mail); ``mail_from`` the sender
    (default ``fusesched@<this host>``); ``mail_domain`` qualifies a bare user name
    (``alice`` → ``alice@<domain>``); ``starttls`` upgrades the connection first; with
    ``smtp_user`` it logs in with ``smtp_password``. ``webhook``: a URL that gets every
    notice as a JSON POST (None: none). ``attempts`` per notice and transport, the first
    pause ``backoff_s`` (doubled each time), ``timeout_s`` per try, at most ``queue_size``
    notices waiting per transport; time limits are checked every ``check_s``."""

    smtp: str | None = None
    mail_from: str = ""
    mail_domain: str = ""
    starttls: bool = False
    smtp_user: str | None = None
    smtp_password: str | None = field(default=None, repr=False)
    webhook: str | None = None
    attempts: int = 3
    backoff_s: float = 2.0
    timeout_s: float = 10.0
    queue_size: int = 1000
    check_s: float = 1.0

    def __post_init__(self) -> None:
        if self.smtp is not None:
            parse_host_port(self.smtp)
            if self.mail_from and "@" not in mail_address(self.mail_from):
                raise ValueError(f"--mail-from {self.mail_from!r}: give a full address, name@host")
            if self.smtp_user is not None and not self.smtp_password:
                raise ValueError(
                    f"--smtp-user needs the password in the environment variable {PASSWORD_ENV}"
                )
        elif self.starttls or self.smtp_user is not None:
            raise ValueError("--smtp-starttls and --smtp-user need --smtp HOST:PORT")
        if self.mail_domain:
            mail_address(f"x@{self.mail_domain}")  # a host name
        if self.webhook is not None:
            parts = urlsplit(self.webhook)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(
                    f"--notify-webhook {self.webhook!r}: give an http:// or https:// URL"
                )
        if self.attempts < 1 or self.queue_size < 1:
            raise ValueError("attempts and queue_size must be at least 1")
        if not (self.backoff_s >= 0 and self.timeout_s > 0 and self.check_s > 0):
            raise ValueError("backoff_s must be ≥ 0, timeout_s and check_s > 0")

    @property
    def sender(self) -> str:
        return self.mail_from or f"fusesched@{socket.getfqdn() or 'localhost'}"

    def recipient(self, to: str) -> str:
        """``to`` as mailed: a bare user name gets ``@mail_domain`` where one is set."""
        if "@" in to or not self.mail_domain:
            return to
        return f"{to}@{self.mail_domain}"


class Transport(Protocol):
    """Sends one notice; raises on failure (the caller retries)."""

    name: str

    def send(self, notice: Notice) -> None: ...

    def close(self) -> None: ...


class SmtpTransport:
    """Mail through an SMTP server (one connection per notice: notices are rare)."""

    name = "smtp"

    def __init__(self, config: NotifyConfig) -> None:
        assert config.smtp is not None
        self.config = config
        self.host, self.port = parse_host_port(config.smtp)

    def message(self, notice: Notice) -> EmailMessage:
        msg = EmailMessage(policy=_MAIL_POLICY)
        msg["From"] = self.config.sender
        msg["To"] = self.config.recipient(notice.to)
        msg["Subject"] = subject(notice)
        msg["Date"] = formatdate(notice.time, localtime=True)
        msg["Message-ID"] = make_msgid(domain=self.config.sender.rpartition("@")[2] or None)
        msg["X-Fusesched-Job"] = notice.job_id
        msg["X-Fusesched-Event"] = notice.event.value
        msg.set_content(body(notice))
        return msg

    def send(self, notice: Notice) -> None:
        config = self.config
        message = self.message(notice)  # (a bad header raises before any connection)
        with smtplib.SMTP(self.host, self.port, timeout=config.timeout_s) as smtp:
            if config.starttls:
                smtp.starttls(context=ssl.create_default_context())
            if config.smtp_user is not None:
                smtp.login(config.smtp_user, config.smtp_password or "")
            # the one recipient, not whatever addresses the To header parses as
            smtp.send_message(message, to_addrs=[config.recipient(notice.to)])

    def close(self) -> None:
        pass


class WebhookTransport:
    """A JSON POST of each notice (:func:`~fusesched.controller.notify_text.payload`); any
    answer but 2xx is a failure."""

    name = "webhook"

    def __init__(self, config: NotifyConfig) -> None:
        assert config.webhook is not None
        self.url = config.webhook
        self.shown = shown_url(config.webhook)
        self._client = httpx.Client(timeout=config.timeout_s)

    def send(self, notice: Notice) -> None:
        reply = self._client.post(self.url, json=payload(notice))
        if not reply.is_success:
            raise RuntimeError(f"{self.shown} answered HTTP {reply.status_code}")

    def close(self) -> None:
        self._client.close()


def shown_url(url: str) -> str:
    """``url`` as logs may show it: its scheme and host only, since a webhook's secret is
    often in its path, query or credentials (``https://hooks.example/services/T0/B1/XyZ`` →
    ``https://hooks.example/…``)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    rest = "/…" if parts.path.strip("/") or parts.query or parts.fragment else ""
    return f"{parts.scheme}://{host}{rest}"


def transports(config: NotifyConfig | None) -> list[Transport]:
    """The transports ``config`` names (none for None)."""
    if config is None:
        return []
    out: list[Transport] = []
    if config.smtp is not None:
        out.append(SmtpTransport(config))
    if config.webhook is not None:
        out.append(WebhookTransport(config))
    return out


class Delivery:
    """One transport's queue and sending thread, with its counts (sent, failed: given up
    after every attempt, dropped: the queue was full)."""

    def __init__(self, transport: Transport, config: NotifyConfig) -> None:
        self.transport = transport
        self.config = config
        self.sent = 0
        self.failed = 0
        self.dropped = 0
        self._queue: queue.Queue[Notice | None] = queue.Queue(maxsize=config.queue_size)
        self._stop = threading.Event()
        self._until = float("inf")  # (stopping) time.monotonic() when what is left is lost
        self._thread = threading.Thread(
            target=self._run, name=f"fusesched-notify-{transport.name}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self, wait_s: float = 2.0) -> None:
        """Send what is queued, one try each (no more retries), for at most ``wait_s``;
        notices still queued then are not sent (the thread ends after the send under way)."""
        self._until = time.monotonic() + wait_s
        self._stop.set()
        with contextlib.suppress(queue.Full):  # (a full queue: the flag stops it)
            self._queue.put_nowait(None)
        if self._thread.is_alive():
            self._thread.join(timeout=wait_s)
        self.transport.close()

    def offer(self, notice: Notice) -> None:
        """Queue ``notice``; never blocks (a full queue drops it, counted and logged)."""
        try:
            self._queue.put_nowait(notice)
        except queue.Full:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 100 == 0:
                log.warning(
                    "%s: %d notices waiting already; dropped the notice of job %s (%d dropped "
                    "so far)",
                    self.transport.name,
                    self.config.queue_size,
                    notice.job_id,
                    self.dropped,
                )

    def _run(self) -> None:
        while True:
            if self._stop.is_set():  # stopping: what is queued, one try each, then out
                if time.monotonic() >= self._until:
                    self._give_up_queued()
                    return
                try:
                    notice = self._queue.get_nowait()
                except queue.Empty:
                    return
            else:
                notice = self._queue.get()
            if notice is not None:  # (None: the stop's wake-up)
                self._deliver(notice)

    def _give_up_queued(self) -> None:
        left = 0
        with contextlib.suppress(queue.Empty):
            while True:
                left += self._queue.get_nowait() is not None
        if left:
            log.warning(
                "%s: stopped with %d notice(s) not sent; they are lost", self.transport.name, left
            )

    def _deliver(self, notice: Notice) -> None:
        pause = self.config.backoff_s
        for attempt in range(1, self.config.attempts + 1):
            try:
                self.transport.send(notice)
            except Exception as exc:  # any failure of a transport: retried, never raised
                last = attempt == self.config.attempts or self._stop.is_set()
                if last:
                    self.failed += 1
                    log.warning(
                        "%s: gave up on the %s notice of job %s after %d attempt(s): %s",
                        self.transport.name,
                        notice.event.value,
                        notice.job_id,
                        attempt,
                        exc,
                    )
                    return
                log.info(
                    "%s: the %s notice of job %s failed (%s); trying again in %.1f s",
                    self.transport.name,
                    notice.event.value,
                    notice.job_id,
                    exc,
                    pause,
                )
                if self._stop.wait(pause):
                    self.failed += 1
                    return
                pause *= 2
            else:
                self.sent += 1
                return
