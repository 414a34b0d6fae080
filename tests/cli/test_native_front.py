"""The native front of ``fusesched`` (src/fusesched/cli/front.c) against the Python command:
for every case, both run as real processes against the same recording HTTP server, and what
they send (path, headers, body) and what they print (stdout, stderr, exit code) must be equal.
Where the front hands over to Python (a mistake found before sending, a case it does not
handle), a ``sitecustomize`` marker shows that Python ran; on its own path it must not."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cli.conftest import Script
from tests.conftest import build_front

from fusesched.slurm_release import version_line

#: The Python command as the console script runs it (no current directory first on sys.path).
PYTHON = [
    sys.executable,
    "-c",
    "import sys;sys.path[:1]==['']and sys.path.pop(0);sys.argv[0]='fusesched';"
    "from fusesched.cli.entry import main;main()",
]

YAML = 'name: "quoted \\"one\\""\ncommand: ["true"]\nresources: {cpu: 1}\n'
TRICKY = "# é, 日本, 🚀, tab\there, back\\slash, \x01 control\r\nname: t2\rcommand: [x]\n"
SCRIPT = "#!/bin/sh\n#SBATCH --job-name=s\n#SBATCH -n 1\ntrue\n"


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "job.yaml").write_text(YAML)
    (tmp_path / "tricky.yaml").write_bytes(TRICKY.encode())
    (tmp_path / "run.sh").write_text(SCRIPT)
    (tmp_path / "latin1.yaml").write_bytes("name: caf\xe9\n".encode("latin-1"))
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os\nopen(os.environ['PY_MARKER'], 'a').write('ran\\n')\n"
    )
    return tmp_path


def environment(root: Path, url: str, **extra: str) -> dict[str, str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(root),
        "XDG_CONFIG_HOME": str(root / "config"),
        "USER": "tester",
        "LANG": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONPATH": str(root / "hook"),
        "PY_MARKER": str(root / "python-ran"),
        "FUSESCHED_CONTROLLER": url,
    }
    env.update(extra)
    return {k: v for k, v in env.items() if v != "<unset>"}


def run(command: list[str], args: list[str], env: dict[str, str], cwd: Path) -> tuple[Any, ...]:
    marker = Path(env["PY_MARKER"])
    marker.unlink(missing_ok=True)
    done = subprocess.run(
        command + args,
        capture_output=True,
        timeout=60,
        env=env,
        cwd=cwd,
        check=False,
        stdin=subprocess.DEVNULL,  # (sbatch with no script named reads one from it)
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode(), marker.exists()


def compare(
    front: Path,
    root: Path,
    script: Script | None,
    args: list[str],
    url: str,
    **extra: str,
) -> tuple[Any, ...]:
    """Runs Python, then the front; asserts the same output and requests; returns the front's
    (rc, stdout, stderr, python ran)."""
    env = environment(root, url, **extra)
    python = run(PYTHON, args, env, root)
    sent = len(script.received) if script else 0
    native = run([str(front)], args, env, root)
    assert native[:3] == python[:3]
    if script is not None:
        assert len(script.received) == 2 * sent
        for mine, theirs in zip(script.received[sent:], script.received[:sent], strict=True):
            assert mine["path"] == theirs["path"]
            assert mine["body"] == theirs["body"]
            for header in ("authorization", "host", "content-type"):
                assert mine["headers"].get(header) == theirs["headers"].get(header)
    return native


OK = b'{"ids": ["1"]}'
ANSWERED: list[tuple[str, list[str], int, bytes, bool, dict[str, str], int]] = [
    ("submit", ["submit", "job.yaml"], 200, b'{"ids": ["7"], "warnings": []}', False, {}, 0),
    ("json", ["submit", "--json", "job.yaml"], 200, b'{"ids": ["7"]}', False, {}, 0),
    (
        "two-files",
        ["submit", "job.yaml", "tricky.yaml", "--json"],
        200,
        b'{"ids": ["8", "9"]}',
        False,
        {},
        0,
    ),
    ("sbatch", ["sbatch", "-J", "x", "--time=5", "run.sh"], 200, b'{"ids": ["3"]}', False, {}, 0),
    ("sbatch-json", ["sbatch", "--json", "run.sh"], 200, b'{"ids": ["3"]}', False, {}, 0),
    # an existing file as an option's value is that value, not the script (as Slurm's)
    ("sbatch-output-exists", ["sbatch", "-o", "job.yaml", "run.sh"], 200, OK, False, {}, 0),
    (
        "sbatch-values",
        ["sbatch", "--output", "job.yaml", "-eerr.txt", "--nice", "-n1", ":", "-n2", "run.sh"],
        200,
        OK,
        False,
        {},
        0,
    ),
    ("sbatch-parsable", ["sbatch", "--parsable", "run.sh"], 200, OK, False, {}, 0),
    (
        "submit-parsable",
        ["submit", "job.yaml", "--parsable", "job.yaml"],
        200,
        b'{"ids": ["8", "9"], "warnings": ["w"]}',
        False,
        {},
        0,
    ),
    (
        "chunked-warnings",
        ["submit", "job.yaml"],
        200,
        b'{"ids": ["4"], "warnings": ["w \\u00e9 1", "w2"]}',
        True,
        {},
        0,
    ),
    (
        "integer-ids",
        ["submit", "--json", "job.yaml", "job.yaml"],
        200,
        b'{"ids": [7, 8]}',
        False,
        {},
        0,
    ),
    (
        "unicode-id",
        ["submit", "--json", "job.yaml"],
        200,
        b'{"ids": ["j\\u00e9\\ud83d\\ude80"]}',
        False,
        {},
        0,
    ),
    (
        "refused",
        ["submit", "job.yaml"],
        422,
        b'{"detail": "job.yaml:2: no \\"command\\""}',
        False,
        {},
        2,
    ),
    (
        "refused-fields",
        ["sbatch", "run.sh"],
        422,
        b'{"detail": [{"loc": ["body", "files", 0], "msg": "field required"}, {"msg": "m2"}]}',
        False,
        {},
        2,
    ),
    ("forbidden", ["submit", "job.yaml"], 403, b'{"detail": "not yours"}', False, {}, 2),
    ("server-error", ["submit", "job.yaml"], 500, b"<html>oops</html>", False, {}, 1),
    ("no-detail", ["submit", "job.yaml"], 404, b'{"error": "x"}', False, {}, 2),
    ("no-ids", ["submit", "job.yaml"], 200, b'{"ids": [], "warnings": []}', False, {}, 1),
    ("not-json", ["submit", "job.yaml"], 200, b"<html>hello</html>", False, {}, 1),
    ("token-option", ["submit", "--token", "s1", "job.yaml"], 200, OK, False, {}, 0),
    ("token-env", ["submit", "job.yaml"], 200, OK, False, {"FUSESCHED_TOKEN": " s2\n"}, 0),
    ("job-token", ["submit", "job.yaml"], 200, OK, False, {"FUSESCHED_JOB_TOKEN": "s3"}, 0),
    ("logname", ["submit", "job.yaml"], 200, OK, False, {"LOGNAME": "alice"}, 0),
]


@pytest.mark.parametrize(
    ("args", "status", "body", "chunked", "extra", "code"),
    [case[1:] for case in ANSWERED],
    ids=[case[0] for case in ANSWERED],
)
def test_the_front_sends_and_prints_what_python_does(
    native_front: Path,
    files: Path,
    server: tuple[str, Script],
    args: list[str],
    status: int,
    body: bytes,
    chunked: bool,
    extra: dict[str, str],
    code: int,
) -> None:
    url, script = server
    script.status, script.body, script.chunked = status, body, chunked
    rc, _, _, python_ran = compare(native_front, files, script, args, url, **extra)
    assert (rc, python_ran) == (code, False)  # answered on its own


def test_a_token_file_and_a_base_path(native_front: Path, files: Path, server: Any) -> None:
    url, script = server
    token = files / "config" / "fusesched" / "token"
    token.parent.mkdir(parents=True)
    token.write_text("from-file\n")
    args = ["submit", f"--controller={url}/prefix//", "job.yaml"]
    rc, out, _, python_ran = compare(native_front, files, script, args, "http://127.0.0.1:9")
    assert (rc, out, python_ran) == (0, "Submitted job 7\n", False)
    assert script.received[-1]["path"] == "/prefix/v1/submissions"
    assert script.received[-1]["headers"]["authorization"] == "Bearer from-file"


def test_the_environment_is_sent_as_python_sends_it(
    native_front: Path, files: Path, server: Any
) -> None:
    """``submit_env`` (what batch jobs inherit, as sbatch's --export=ALL): every variable of
    text, sorted, escaped as JSON; a name or value that is not UTF-8 is left out by both."""
    url, script = server
    tricky = {"UNICODE": "é 日本 🚀", "CTRL": 'a\tb\x01c"\\', "BASH_FUNC_m%%": "() { echo; }"}
    env: dict[Any, Any] = environment(files, url, **tricky)
    env[b"LATIN1"] = b"caf\xe9"
    env[b"N\xff"] = b"x"
    python = run(PYTHON, ["sbatch", "run.sh"], env, files)
    native = run([str(native_front)], ["sbatch", "run.sh"], env, files)
    assert native == (*python[:3], False) and python[0] == 0
    mine, theirs = script.received[-1]["body"], script.received[-2]["body"]
    assert mine == theirs
    sent = mine["submit_env"]
    assert {k: sent[k] for k in tricky} == tricky and "LATIN1" not in sent
    assert list(sent) == sorted(sent) and sent["PATH"] == "/usr/bin:/bin"


def test_a_token_that_cannot_be_sent(native_front: Path, files: Path, server: Any) -> None:
    url, script = server
    rc, _, err, python_ran = compare(
        native_front, files, script, ["submit", "job.yaml"], url, FUSESCHED_TOKEN="a\tb"
    )
    assert (rc, python_ran) == (1, False)
    assert "characters a token cannot have" in err
    assert script.received == []


HANDED_OVER: list[tuple[str, list[str], dict[str, str]]] = [
    ("help", ["submit", "--help"], {}),
    ("missing-file", ["submit", "nope.yaml"], {}),
    ("unknown-option", ["submit", "--bogus", "job.yaml"], {}),
    ("no-files", ["submit", "--json"], {}),
    ("no-script", ["sbatch", "-J", "x"], {}),
    ("after-script", ["sbatch", "run.sh", "extra"], {}),
    ("not-utf8", ["submit", "latin1.yaml"], {}),
    ("no-value", ["submit", "job.yaml", "--controller"], {}),
    (
        "help-as-a-value",
        ["sbatch", "--token", "-h", "run.sh"],
        {"FUSESCHED_CONTROLLER": "http://127.0.0.1:9"},
    ),
    ("unreachable", ["submit", "--controller", "http://127.0.0.1:9", "job.yaml"], {}),
    ("bad-url", ["submit", "--controller", "http://localhost:x", "job.yaml"], {}),
    ("https", ["submit", "--controller", "https://127.0.0.1:9", "job.yaml"], {}),
    ("ca", ["submit", "--ca", "nope.pem", "job.yaml"], {}),
    ("other-command", ["jobs", "--json"], {"FUSESCHED_CONTROLLER": "http://127.0.0.1:9"}),
    ("parsable-json", ["sbatch", "--parsable", "--json", "run.sh"], {}),
    ("parsable-after-script", ["sbatch", "run.sh", "--parsable"], {}),
    ("parsable-both-sides", ["sbatch", "--parsable", "run.sh", "--parsable"], {}),
    # the script's arguments, a script read from standard input, options the front's table
    # cannot tell (flags run together, an unknown one, "--"): Python's
    ("script-args", ["sbatch", "-o", "job.yaml", "run.sh", "a b", "", "é"], {}),
    ("stdin", ["sbatch", "-J", "x"], {}),
    ("dev-stdin", ["sbatch", "/dev/stdin"], {}),
    ("flags-together", ["sbatch", "-HQ", "run.sh"], {}),
    ("sbatch-unknown-option", ["sbatch", "--frobnicate", "-n1", "run.sh"], {}),
    ("double-dash", ["sbatch", "--", "run.sh"], {}),
    # our options after the script are the script's arguments, as every word there
    ("json-after-script", ["sbatch", "run.sh", "--json"], {}),
    ("controller-after-script", ["sbatch", "run.sh", "--controller", "http://127.0.0.1:9"], {}),
    # an option's value spelt like an option (-J --json names the job "--json", as Slurm's
    # getopt reads it): the front sent run.sh as --json's, named x
    ("own-option-as-a-value", ["sbatch", "-J", "--json", "x", "run.sh"], {}),
    ("value-like-an-option", ["sbatch", "-J", "--json", "run.sh"], {}),
    ("parsable-as-a-value", ["sbatch", "--comment", "--parsable", "run.sh"], {}),
]


@pytest.mark.parametrize(
    ("args", "extra"), [case[1:] for case in HANDED_OVER], ids=[case[0] for case in HANDED_OVER]
)
def test_what_the_front_does_not_handle_is_pythons(
    native_front: Path,
    files: Path,
    server: tuple[str, Script],
    args: list[str],
    extra: dict[str, str],
) -> None:
    url, script = server
    # (the full command submits its own request: POST /v1/jobs answers the job's id)
    script.body = b'{"id": "7", "ids": ["7"], "warnings": []}'
    rc, out, err, python_ran = compare(native_front, files, script, args, url, **extra)
    assert python_ran
    assert "Traceback" not in err
    assert rc != 0 or out


@pytest.mark.parametrize(
    "args",
    [
        ["sbatch", "--version", "run.sh"],
        ["sbatch", "-V", "run.sh"],
        ["sbatch", "-n1", "--parsable", "-V", "run.sh"],
        ["sbatch", "-HV", "run.sh"],
        ["sbatch", "--version"],
    ],
)
def test_sbatchs_version_is_pythons_and_submits_nothing(
    native_front: Path, files: Path, server: tuple[str, Script], args: list[str]
) -> None:
    """-V/--version before the script: Slurm's sbatch prints its version and does nothing
    else; the front hands it to Python, which does the same."""
    url, script = server
    rc, out, err, python_ran = compare(native_front, files, script, args, url)
    assert (rc, out, err, python_ran) == (0, version_line() + "\n", "", True)
    assert script.received == []


def test_a_version_option_that_is_not_sbatchs_is_submitted(
    native_front: Path, files: Path, server: tuple[str, Script]
) -> None:
    """-V as an option's value (the job's name) or after the script (the script's argument)
    asks for no version: the job is submitted."""
    url, script = server
    script.body = OK
    rc, out, _, python_ran = compare(
        native_front, files, script, ["sbatch", "-J", "-V", "run.sh"], url
    )
    assert (rc, out, python_ran) == (0, "Submitted batch job 1\n", False)
    assert script.received[-1]["body"]["files"][0]["args"] == ["-J", "-V"]
    script.received.clear()
    script.body = b'{"id": "7", "ids": ["7"], "warnings": []}'  # (Python's full command)
    rc, out, _, python_ran = compare(native_front, files, script, ["sbatch", "run.sh", "-V"], url)
    assert (rc, out, python_ran) == (0, "Submitted batch job 7\n", True)


def test_several_controllers_go_to_python(native_front: Path, files: Path, server: Any) -> None:
    url, script = server
    both = f"{url},http://127.0.0.1:9"
    rc, out, _, python_ran = compare(native_front, files, script, ["submit", "job.yaml"], both)
    assert (rc, out, python_ran) == (0, "Submitted job 7\n", True)


def test_everything_to_python_when_asked(native_front: Path, files: Path, server: Any) -> None:
    url, script = server
    rc, _, _, python_ran = compare(
        native_front, files, script, ["submit", "job.yaml"], url, FUSESCHED_NATIVE="0"
    )
    assert (rc, python_ran) == (0, True)


def test_once_sent_a_lost_answer_is_not_sent_again(native_front: Path, files: Path) -> None:
    """The server reads the request and closes: the submission may have been made, so the
    front says so and does not hand over to Python (which would submit a second time)."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    accepted: list[int] = []

    def close_each() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.recv(65536)
            accepted.append(1)
            conn.close()

    thread = threading.Thread(target=close_each, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{port}"
        rc, _, err, python_ran = compare(native_front, files, None, ["submit", "job.yaml"], url)
        assert (rc, python_ran) == (1, False)
        assert "may or may not have been carried out" in err
        assert len(accepted) == 2  # one by Python, one by the front
    finally:
        stop(listener, thread)


def test_the_current_directory_is_not_imported_from(native_front: Path, files: Path) -> None:
    """Handed over, the Python command imports what the console script would: not a json.py
    where the user stands."""
    (files / "json.py").write_text("raise SystemExit('the json.py of the current directory')\n")
    env = environment(files, "http://127.0.0.1:9")
    rc, _, err, python_ran = run([str(native_front)], ["submit", "nope.yaml"], env, files)
    assert (rc, err, python_ran) == (2, "error: nope.yaml: no such file\n", True)


# ---- a hostile or broken server: the same messages as Python's, no crash, no second try -----


class Hostile:
    """A socket server that reads each request whole, counts it and answers ``answer`` as is,
    then closes the connection (or, with ``keep_open``, leaves it open)."""

    def __init__(self) -> None:
        self.answer = b""
        self.keep_open = False
        self.received = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.open: list[socket.socket] = []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            try:
                self.exchange(conn)
            except (OSError, ValueError, StopIteration):
                conn.close()

    def exchange(self, conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data and (chunk := conn.recv(65536)):
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(body) < length and (chunk := conn.recv(65536)):
            body += chunk
        self.received += 1
        conn.sendall(self.answer)
        if self.keep_open:
            self.open.append(conn)
        else:
            conn.close()

    def close(self) -> None:
        stop(self.listener, self.thread)
        for conn in self.open:
            conn.close()


def stop(listener: socket.socket, thread: threading.Thread) -> None:
    """Closes a listening socket, waking the thread blocked in its accept()."""
    with contextlib.suppress(OSError):
        listener.shutdown(socket.SHUT_RDWR)
    listener.close()
    thread.join(5)


@pytest.fixture
def hostile() -> Iterator[Hostile]:
    server = Hostile()
    try:
        yield server
    finally:
        server.close()


def answer(status: bytes, body: bytes, head: bytes | None = None) -> bytes:
    """An HTTP answer with ``body`` and ``head`` (default: the body's Content-Length)."""
    if head is None:
        head = b"Content-Length: %d\r\n" % len(body)
    return b"HTTP/1.1 " + status + b"\r\n" + head + b"\r\n" + body


IDS = b'{"ids": ["1"]}'
CHUNKED = b"Transfer-Encoding: chunked\r\n"
HOSTILE: list[tuple[str, bytes]] = [
    # sizes past any integer type (they overflowed, or wrapped to the last chunk)
    ("huge-length", answer(b"200 OK", IDS, b"Content-Length: 99999999999999999999999999\r\n")),
    ("length-2**64+1", answer(b"200 OK", IDS, b"Content-Length: 18446744073709551617\r\n")),
    ("huge-chunk", answer(b"200 OK", b"10000000000000000\r\n" + IDS + b"\r\n0\r\n\r\n", CHUNKED)),
    ("max-chunk", answer(b"200 OK", b"ffffffffffffffff\r\n" + IDS + b"\r\n0\r\n\r\n", CHUNKED)),
    ("huge-status", answer(b"99999999999999999999 X", b"nope")),
    # sizes and statuses as Python's int() reads them, or says it cannot
    ("status-digits", answer(b"+0_4_22 X", b'{"detail": "d"}')),
    ("bad-status", answer(b"2x0 OK", IDS)),
    ("bad-length", answer(b"200 OK", IDS, b"Content-Length: 1x\r\n")),
    ("negative-length", answer(b"200 OK", IDS + b"abc", b"Content-Length: -3\r\n")),
    ("hex-chunk", answer(b"200 OK", b"0xe ; x=1\r\n" + IDS + b"\r\n0", CHUNKED)),
    ("no-last-chunk", answer(b"200 OK", b"e\r\n" + IDS + b"\r\n", CHUNKED)),
    ("cut-chunk", answer(b"200 OK", b"e\r\n" + IDS[:5], CHUNKED)),
    ("cut-body", answer(b"200 OK", IDS[:5], b"Content-Length: 14\r\n")),
    ("header-no-colon", answer(b"200 OK", IDS, CHUNKED + b"Transfer-Encoding\r\n")),
    ("head-only", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"),
    ("not-http", b"SSH-2.0-OpenSSH_9.2\r\n"),
    ("no-length", b"HTTP/1.0 200 OK\r\n\r\n" + IDS),
    # JSON that is not quite JSON (a NUL in a number was read past its end; an empty key
    # was read from uninitialised memory)
    ("nul-in-number", answer(b"200 OK", b'{"ids": [\0\0\0\0\0\0\0\0]}')),
    ("nul-in-key", answer(b"200 OK", b'{"ids\\u0000x": ["1"]}')),
    ("empty-key", answer(b"200 OK", b'{"": 1, "ids": ["1"]}')),
    ("loose-number", answer(b"200 OK", b'{"ids": [1e]}')),
    ("leading-zero", answer(b"200 OK", b'{"ids": [01]}')),
    ("numbers", answer(b"200 OK", b'{"ids": [-12, 0, true, null, NaN, -Infinity]}')),
    ("byte-order-mark", answer(b"200 OK", b"\xef\xbb\xbf" + IDS)),
    ("not-utf8", answer(b"200 OK", b'{"ids": ["\xff"]}')),
    ("surrogates", answer(b"200 OK", b'{"ids": ["a\\ud800", "\xed\xa0\x80", "\\udc00\\ud83d"]}')),
    ("deep", answer(b"200 OK", b'{"ids": ["1"], "x": ' + b"[" * 300 + b"]" * 300 + b"}")),
    ("warnings-text", answer(b"200 OK", b'{"ids": ["1"], "warnings": "ab\\u00e9\\u0000"}')),
    # refusals
    (
        "refused-not-utf8",
        answer(b"500 X", b"\xe6\x97x\xed\xa0\x80\xf4\x90\x80 " + b"\xc3\xa9" * 600),
    ),
    ("refused-empty-loc", answer(b"422 X", b'{"detail": [{"loc": ["", ""], "msg": "m"}]}')),
    ("refused-text-loc", answer(b"422 X", b'{"detail": [{"loc": "ab", "msg": "m"}]}')),
    ("refused-dict", answer(b"409 X", b'{"detail": {"a": [1, "it\'s", null, "x\\ny", {}]}}')),
    ("refused-no-msg", answer(b"422 X", b'{"detail": [{"loc": ["body", "f"], "x": "q\\"\'"}]}')),
]


#: Answers whose head says where they end, so that the exchange ends with them while the
#: server keeps the connection open (the others would wait for the timeout, in both commands).
ENDING = {"status-digits", "negative-length", "hex-chunk", "header-no-colon", "nul-in-number"}


@pytest.mark.parametrize(
    ("raw", "keep_open"),
    [(raw, False) for _, raw in HOSTILE] + [(raw, True) for name, raw in HOSTILE if name in ENDING],
    ids=[name for name, _ in HOSTILE]
    + [f"{name}-kept-open" for name, _ in HOSTILE if name in ENDING],
)
def test_a_hostile_answer_reads_as_python_reads_it(
    native_front: Path, files: Path, hostile: Hostile, raw: bytes, keep_open: bool
) -> None:
    """Whatever comes back, the front prints what Python prints, does not crash, and does not
    hand over (which would submit a second time)."""
    hostile.answer, hostile.keep_open = raw, keep_open
    args = ["submit", "--json", "job.yaml"]
    rc, out, err, python_ran = compare(native_front, files, None, args, hostile.url)
    assert (rc >= 0, python_ran, hostile.received) == (True, False, 2)
    assert out if rc == 0 else err.startswith("error: ")


def test_an_answer_too_deep_for_python(native_front: Path, files: Path, hostile: Hostile) -> None:
    """Python's json fails with a RecursionError (a traceback); the front says what Python
    says of an answer it cannot read, with the same exit code."""
    hostile.answer = answer(b"200 OK", b'{"ids": ["1"], "x": ' + b"[" * 5000 + b"]" * 5000 + b"}")
    env = environment(files, hostile.url)
    python = run(PYTHON, ["submit", "job.yaml"], env, files)
    native = run([str(native_front)], ["submit", "job.yaml"], env, files)
    assert python[0] == native[0] == 1
    assert native[1:] == (
        "",
        f"error: {hostile.url} did not answer as a fusesched controller\n",
        False,
    )
    assert hostile.received == 2


def test_ids_print_as_python_prints_them(native_front: Path, files: Path, hostile: Hostile) -> None:
    hostile.answer = answer(b"200 OK", b'{"ids": [7, "\\u00e9", true, null, [1, "a"]]}')
    rc, out, _, python_ran = compare(native_front, files, None, ["submit", "job.yaml"], hostile.url)
    assert (rc, python_ran, hostile.received) == (0, False, 2)
    assert out.splitlines()[-1] == "Submitted job [1, 'a']"


def test_an_unwritable_output_is_an_error_not_a_signal(
    native_front: Path, files: Path, server: Any
) -> None:
    """The submission is made; a closed pipe on stdout fails as Python fails (exit 120, its
    buffered stdout failing at exit; here with a message), a closed stdout succeeds as Python's
    does (nothing to print to)."""
    url, script = server
    env = environment(files, url)
    results = []
    for command in (PYTHON, [str(native_front)]):
        read, write = os.pipe()
        os.close(read)
        broken = subprocess.run(
            [*command, "submit", "job.yaml"],
            stdout=write,
            stderr=subprocess.PIPE,
            env=env,
            cwd=files,
            timeout=60,
            check=False,
        )
        os.close(write)
        closed = subprocess.run(
            ["/bin/sh", "-c", 'exec "$@" >&-', "sh", *command, "submit", "job.yaml"],
            stderr=subprocess.PIPE,
            env=env,
            cwd=files,
            timeout=60,
            check=False,
        )
        results.append((broken.returncode, closed.returncode, closed.stderr, broken.stderr))
    assert [result[:3] for result in results] == [(120, 0, b"")] * 2
    assert results[1][3].endswith(b"the submission was made\n")  # Python: a traceback
    assert len(script.received) == 4


@pytest.fixture(scope="module")
def quick_front(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The front built with a 1-second timeout (instead of fast.TIMEOUT_S)."""
    return build_front(tmp_path_factory.mktemp("front"), "TIMEOUT_S=1")


def test_a_connection_that_times_out_is_not_tried_again(quick_front: Path, files: Path) -> None:
    """A controller that never accepts (a full backlog: Linux drops the handshake): Python
    would wait as long again, so the front says itself what Python says, once."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(listener.getsockname())
        fillers.append(filler)
    try:
        time.sleep(0.2)
        start = time.monotonic()
        rc, out, err, python_ran = run(
            [str(quick_front)], ["submit", "job.yaml"], environment(files, url), files
        )
        assert (rc, out, python_ran) == (1, "", False)
        assert err == f"error: cannot reach the controller at {url}: timed out\n"
        assert time.monotonic() - start < 10
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def test_an_answer_that_stops_coming_times_out(
    quick_front: Path, files: Path, hostile: Hostile
) -> None:
    """Sent, then no end to the answer: the front says what Python says after its timeout."""
    hostile.answer, hostile.keep_open = answer(b"200 OK", b"{", b"Content-Length: 9\r\n"), True
    env = environment(files, hostile.url)
    rc, out, err, python_ran = run([str(quick_front)], ["submit", "job.yaml"], env, files)
    assert (rc, out, python_ran, hostile.received) == (1, "", False, 1)
    assert err == (
        f"error: lost the controller at {hostile.url} during the request (timed out); it may "
        "or may not have been carried out\n"
    )
