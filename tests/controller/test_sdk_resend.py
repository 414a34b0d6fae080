"""The SDK never sends a submission twice when the controller dies mid-request."""

from __future__ import annotations

import socket
import threading

import pytest

from fusesched.sdk import Client, ControllerError


def read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        ),
        0,
    )
    while len(body) < length:
        body += conn.recv(65536)
    return head.split(b" ")[0]


def reply(conn: socket.socket, status: int, body: bytes) -> None:
    conn.sendall(
        b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
        % (status, len(body), body)
    )


def test_a_post_lost_mid_request_is_not_sent_again() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    posts: list[int] = []

    def serve() -> None:
        first, _ = server.accept()
        read_request(first)
        reply(first, 200, b'{"status": "ok"}')
        if read_request(first) == b"POST":
            posts.append(1)  # accepted ...
        first.close()  # ... and the controller dies before it answers
        server.settimeout(2)
        try:
            second, _ = server.accept()
        except TimeoutError:
            return
        if read_request(second) == b"POST":
            posts.append(2)
        reply(second, 201, b'{"id": "2"}')
        second.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client = Client(f"http://127.0.0.1:{port}")
    client.health()
    with pytest.raises(ControllerError, match="may or may not have been carried out"):
        client.submit({"name": "once", "groups": [{"argv": ["true"]}]})
    thread.join(timeout=5)
    server.close()
    assert posts == [1]
