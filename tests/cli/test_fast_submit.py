"""The quick path of ``fusesched submit`` / ``sbatch`` (one POST on a socket of its own)
against a real HTTP server that records what it receives and answers as told."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from tests.cli.conftest import Script

from fusesched.cli import fast
from fusesched.client_base import ControllerError

FILES: list[dict[str, object]] = [{"name": "a.sh", "text": "#!/bin/sh\ntrue\n", "args": []}]


def test_the_files_go_to_submissions_with_the_user(server: tuple[str, Script]) -> None:
    url, script = server
    assert fast.submit_files(FILES, {"--controller": url}) == {"ids": ["7"], "warnings": []}
    (request,) = script.received
    assert request["path"] == "/v1/submissions"
    assert request["body"]["files"] == FILES
    assert request["body"]["user"]  # no token: submitted as the user running the command
    assert "authorization" not in request["headers"]


def test_a_token_is_sent_and_no_user_is_named(server: tuple[str, Script], tmp_path: Path) -> None:
    url, script = server
    fast.submit_files(FILES, {"--controller": url, "--token": "secret-1"})
    token_file = tmp_path / "config" / "fusesched" / "token"
    token_file.parent.mkdir(parents=True)
    token_file.write_text("secret-2\n")
    fast.submit_files(FILES, {"--controller": url})
    first, second = script.received
    assert first["headers"]["authorization"] == "Bearer secret-1"
    assert second["headers"]["authorization"] == "Bearer secret-2"
    assert "user" not in first["body"] and "user" not in second["body"]


def test_a_base_path_and_a_chunked_answer(server: tuple[str, Script]) -> None:
    url, script = server
    script.chunked = True
    script.body = b'{"ids": ["8", "9"], "warnings": ["w"]}'
    assert fast.submit_files(FILES, {"--controller": url + "/prefix/"})["ids"] == ["8", "9"]
    assert script.received[0]["path"] == "/prefix/v1/submissions"


def test_a_refusal_keeps_its_status_and_reason(server: tuple[str, Script]) -> None:
    url, script = server
    script.status = 422
    script.body = b'{"detail": [{"loc": ["body", "files"], "msg": "field required"}]}'
    with pytest.raises(ControllerError) as caught:
        fast.submit_files(FILES, {"--controller": url})
    assert caught.value.status == 422
    assert str(caught.value) == "invalid request: files: field required"


def test_an_answer_that_is_not_a_controllers(server: tuple[str, Script]) -> None:
    url, script = server
    script.body = b"<html>hello</html>"
    with pytest.raises(ControllerError, match="did not answer as a fusesched controller"):
        fast.submit_files(FILES, {"--controller": url})


def test_an_empty_list_of_ids_is_not_an_answer(server: tuple[str, Script]) -> None:
    url, script = server
    script.body = b'{"ids": [], "warnings": []}'
    with pytest.raises(ControllerError, match="did not answer as a fusesched controller"):
        fast.submit_files(FILES, {"--controller": url})


def test_the_answer_is_taken_when_complete_even_if_the_server_keeps_the_connection() -> None:
    """A server that ignores ``Connection: close``: the answer is read by its length, not
    until the connection closes (which would look like a lost request)."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    done = threading.Event()

    def answer_and_linger() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        body = b'{"ids": ["5"], "warnings": []}'
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        done.wait(10)
        conn.close()

    thread = threading.Thread(target=answer_and_linger, daemon=True)
    thread.start()
    try:
        started = time.monotonic()
        answer = fast.submit_files(FILES, {"--controller": f"http://127.0.0.1:{port}"})
        assert answer["ids"] == ["5"]
        assert time.monotonic() - started < 5  # not when the server gives up (10 s)
    finally:
        done.set()
        thread.join(5)
        listener.close()


@pytest.mark.parametrize("token", ["with\r\nInjected: header", "naïve"])
def test_a_token_that_cannot_be_sent_is_refused_before_sending(token: str) -> None:
    with pytest.raises(ControllerError, match="characters a token cannot have"):
        fast.submit_files(FILES, {"--controller": "http://127.0.0.1:9", "--token": token})


def test_a_missing_ca_file_is_a_message(tmp_path: Path) -> None:
    own = {"--controller": "https://127.0.0.1:9", "--ca": str(tmp_path / "nope.pem")}
    with pytest.raises(ControllerError, match=r"cannot submit to https://127\.0\.0\.1:9"):
        fast.submit_files(FILES, own)


def test_a_server_that_closes_without_answering() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def close_at_once() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.close()

    thread = threading.Thread(target=close_at_once, daemon=True)
    thread.start()
    try:
        with pytest.raises(ControllerError, match="may or may not have been carried out"):
            fast.submit_files(FILES, {"--controller": f"http://127.0.0.1:{port}"})
    finally:
        thread.join(5)
        listener.close()


@pytest.mark.parametrize(
    ("controller", "message"),
    [
        ("http://127.0.0.1:9", "cannot reach the controller at http://127.0.0.1:9"),
        ("http://localhost:x", "not a controller URL"),
        ("http://[::1", "not a controller URL"),
        ("http://a..b:80", "cannot reach the controller at http://a..b:80"),
    ],
)
def test_unreachable_or_malformed_controllers(controller: str, message: str) -> None:
    with pytest.raises(ControllerError, match=message.replace("[", r"\[")):
        fast.submit_files(FILES, {"--controller": controller})


def test_the_command_imports_no_http_framework(server: tuple[str, Script], tmp_path: Path) -> None:
    """The point of the quick path: a submission process loads neither http.client nor the
    SDK, nor anything of the simulator."""
    url, _ = server
    job = tmp_path / "job.sh"
    job.write_text("#!/bin/sh\n#SBATCH -n 1\ntrue\n")
    probe = (
        "import sys, runpy; sys.argv = ['fusesched', 'sbatch', '--json', sys.argv[1]];"
        "from fusesched.cli.entry import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m in ('http.client', 'ssl', 'fusesched.sdk',"
        " 'numpy', 'typer', 'pydantic')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, str(job)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"FUSESCHED_CONTROLLER": url, "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    first, loaded = result.stdout.splitlines()
    assert json.loads(first) == {"id": "7"}
    assert loaded == "[]"


def test_a_batch_script_that_is_not_a_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(fast.UsageError, match=r"missing\.sh: no such file"):
        fast._files("sbatch", ["-N", "2", str(tmp_path / "missing.sh")])
    with pytest.raises(fast.UsageError, match="a folder, not a batch script"):
        fast._files("sbatch", [str(tmp_path)])
    with pytest.raises(fast.UsageError, match="no batch script given"):
        fast._files("sbatch", ["--exclusive"])


def test_parsable_prints_the_ids_alone_on_the_quick_path(
    server: tuple[str, Script], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``jid=$(sbatch --parsable job.sh)``, the pipelines' idiom, needs no command framework;
    with ``--json``, or after the script (the script's argument), the full command judges."""
    url, _ = server
    job = tmp_path / "job.sh"
    job.write_text("#!/bin/sh\ntrue\n")
    assert fast.run("sbatch", ["--parsable", "--controller", url, str(job)]) == 0
    assert capsys.readouterr().out == "7\n"
    assert fast.run("submit", [str(job), "--parsable", "--controller", url]) == 0
    assert capsys.readouterr().out == "7\n"
    assert fast.run("sbatch", ["--parsable", "--json", "--controller", url, str(job)]) is None
    assert fast.run("sbatch", ["--controller", url, str(job), "--parsable"]) is None
    # (sbatch's, then the script's own: the full command keeps the script's)
    assert fast.run("sbatch", ["--parsable", "--controller", url, str(job), "--parsable"]) is None
