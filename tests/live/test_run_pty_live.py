"""``fusesched run --pty`` (Slurm's ``srun --pty``) as a person uses it: the real client in a
real pseudo-terminal of the test's, against a live cluster of real agents, an interactive
shell on a node at the other end."""

from __future__ import annotations

import fcntl
import os
import select
import signal
import statistics
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
from tests.live.conftest import local_cluster

from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

#: The controller's InactiveLimit here (a terminal job's holder gets the shorter of it and
#: 30 s): a run killed outright ends its job within seconds.
LIMIT_S = 2


@pytest.fixture(scope="module")
def one_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data = tmp_path_factory.mktemp("pty") / "data"
    with local_cluster(data, lambda c: c[:1], inactive_limit_s=LIMIT_S) as cluster:
        yield cluster


class Reachable(Protocol):
    """A cluster's controller, at ``url``."""

    @property
    def url(self) -> str: ...


class Typist:
    """``fusesched run ARGS`` (``command``: that instead) on a pseudo-terminal of ``rows`` x
    ``cols``, typed to; ``env``: more variables, ``cwd``: where it runs."""

    def __init__(
        self,
        cluster: Reachable,
        *args: str,
        rows: int = 24,
        cols: int = 80,
        command: list[str] | None = None,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.master, slave = os.openpty()
        self.resize(rows, cols)
        variables = {
            "FUSESCHED_CONTROLLER": cluster.url,
            "PATH": "/usr/bin:/bin",
            "TERM": "xterm-256color",
        }
        self.process = subprocess.Popen(
            command or [sys.executable, "-m", "fusesched", "run", "-Q", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=variables | (env or {}),
            cwd=cwd,
            start_new_session=True,
        )
        self.slave = slave  # (kept: the test looks at its modes)
        self.seen = b""

    def resize(self, rows: int, cols: int) -> None:
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def read_until(self, wanted: bytes, timeout: float = 30.0) -> bytes:
        """Everything read until ``wanted`` has been seen (since the last call's match)."""
        deadline = time.monotonic() + timeout
        while wanted not in self.seen:
            left = deadline - time.monotonic()
            assert left > 0, f"{wanted!r} not seen; the terminal showed {self.seen!r}"
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.master, 4096)
                except OSError:  # EIO: the client has gone
                    chunk = b""
                assert chunk, f"{wanted!r} not seen before the end: {self.seen!r}"
                self.seen += chunk
        cut = self.seen.index(wanted) + len(wanted)
        got, self.seen = self.seen[:cut], self.seen[cut:]
        return got

    def finish(self, timeout: float = 30.0) -> tuple[int, bytes]:
        """The client's exit code and the rest of what the terminal showed."""
        deadline = time.monotonic() + timeout
        while self.process.poll() is None or select.select([self.master], [], [], 0)[0]:
            assert time.monotonic() < deadline, f"still running; it showed {self.seen!r}"
            if select.select([self.master], [], [], 0.2)[0]:
                try:
                    chunk = os.read(self.master, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                self.seen += chunk
        os.close(self.master)
        os.close(self.slave)
        return self.process.wait(timeout), self.seen

    def cooked(self) -> bool:
        """Whether the test's terminal edits lines and echoes (as before the client ran)."""
        lflag = termios.tcgetattr(self.slave)[3]
        return bool(lflag & termios.ICANON and lflag & termios.ECHO)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def newest(cluster: LocalCluster) -> dict[str, Any]:
    return max(Client(cluster.url).jobs(), key=lambda job: int(job["id"]))


PROMPT = b"ready> "


def shell(cluster: LocalCluster, rows: int = 24, cols: int = 80) -> Typist:
    """An interactive shell on the cluster, its prompt :data:`PROMPT`, once it is shown."""
    return prompted(Typist(cluster, "--pty", "bash", "--norc", "-i", rows=rows, cols=cols))


def prompted(typist: Typist) -> Typist:
    """``typist`` once its interactive bash shows its prompt, made :data:`PROMPT`."""
    typist.read_until(b"$ ", 60)  # (bash's own prompt: typed ahead, a line may be dropped)
    typist.type(f"PS1='{PROMPT.decode()}'\r")
    typist.read_until(PROMPT)  # (the line's echo, then the new prompt)
    typist.read_until(PROMPT)
    return typist


def test_an_interactive_shell_runs_on_a_node_and_exits_with_its_code(
    one_node: LocalCluster,
) -> None:
    typist = shell(one_node)
    try:
        typist.type("echo $((6*7)); tty; echo $TERM; exit 3\r")
        code, shown = typist.finish()
    finally:
        typist.kill()
    assert code == 3, shown
    # (the node's terminal's output: its newlines made CR LF, tty's a /dev/pts/ path)
    assert b"\r42\r\n/dev/pts/" in shown and b"\r\nxterm-256color\r\n" in shown
    assert newest(one_node)["exit_code"] == 3


def test_ctrl_c_reaches_the_program_and_the_window_size_follows(one_node: LocalCluster) -> None:
    typist = shell(one_node, rows=33, cols=101)
    try:
        typist.type("stty size\r")
        assert b"33 101" in typist.read_until(PROMPT)
        typist.resize(40, 120)  # (the test's terminal has no session: SIGWINCH by hand)
        os.kill(typist.process.pid, signal.SIGWINCH)
        time.sleep(0.5)
        typist.type("stty size\r")  # (bash redraws its prompt on SIGWINCH, then answers)
        typist.read_until(b"\r40 120\r\n")
        typist.read_until(PROMPT)
        typist.type("sleep 60\r")
        time.sleep(0.5)
        started = time.monotonic()
        typist.type("\x03")  # Ctrl-C: a byte, which the node's terminal makes SIGINT
        typist.read_until(PROMPT)
        assert time.monotonic() - started < 10
        typist.type("\x04")  # Ctrl-D at an empty line: the shell's end of input
        code, shown = typist.finish()
    finally:
        typist.kill()
    assert code == 130, shown  # (bash's last status: sleep's, ended by SIGINT)


def test_keystroke_round_trip_on_loopback(one_node: LocalCluster) -> None:
    """Type a character at the shell's prompt, time until the shell's echo of it is back."""
    typist = shell(one_node)
    try:
        times = []
        for char in "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMN":
            started = time.perf_counter()
            typist.type(char)
            typist.read_until(char.encode())
            times.append(time.perf_counter() - started)
        typist.type("\x15exit\r")  # (Ctrl-U: the line typed so far is dropped)
        code, _ = typist.finish()
    finally:
        typist.kill()
    assert code == 0
    median = statistics.median(times)
    print(f"\nkeystroke round trip: median {median * 1000:.1f} ms, max {max(times) * 1000:.1f} ms")
    assert median < 0.5


def piped_run(
    cluster: LocalCluster, given: bytes, *command: str
) -> subprocess.CompletedProcess[bytes]:
    """``fusesched run -Q --pty COMMAND`` with ``given`` on its standard input, a pipe."""
    env = {"FUSESCHED_CONTROLLER": cluster.url, "PATH": "/usr/bin:/bin", "COLUMNS": "123"}
    return subprocess.run(
        [sys.executable, "-m", "fusesched", "run", "-Q", "--pty", *command],
        input=given,
        capture_output=True,
        env=env,
        timeout=60,
    )


def test_a_piped_input_is_typed_to_a_terminal_and_its_end_is_ctrl_d(
    one_node: LocalCluster,
) -> None:
    """As Slurm's ``echo ... | srun --pty bash``: the task still has a terminal (of $COLUMNS
    here), the pipe's bytes are typed to it, and the pipe's end is one Ctrl-D."""
    piped = piped_run(one_node, b"echo hi; tty; stty size; exit 3\n", "bash", "--norc")
    lines = piped.stdout.split(b"\r\n")
    assert piped.returncode == 3, piped
    assert b"hi" in lines and b"24 123" in lines, piped
    assert any(line.startswith(b"/dev/pts/") for line in lines), piped
    ended = piped_run(one_node, b"", "cat")  # (Ctrl-D alone: cat reads its end, exits 0)
    assert ended.returncode == 0, ended


def test_pty_runs_one_task(one_node: LocalCluster) -> None:
    typist = Typist(one_node, "-n", "2", "--pty", "bash")
    code, shown = typist.finish()
    assert code == 2 and b"--pty runs one task" in shown


def test_sigterm_restores_the_terminal_and_cancels_the_job(one_node: LocalCluster) -> None:
    typist = shell(one_node)
    try:
        job_id = newest(one_node)["id"]
        assert not typist.cooked()  # raw while relaying
        typist.process.send_signal(signal.SIGTERM)
        typist.process.wait(30)
        assert typist.cooked()  # as it was
        code, shown = typist.finish()
    finally:
        typist.kill()
    assert code == 128 + signal.SIGTERM, shown
    assert b"cancelling job" in shown
    final = Client(one_node.url).wait(job_id, timeout=30)
    assert final["state"] == "Cancelled", final


def test_a_run_killed_outright_ends_its_job_soon(one_node: LocalCluster) -> None:
    typist = shell(one_node)
    try:
        job_id = newest(one_node)["id"]
        typist.process.kill()
        typist.process.wait()
        final = Client(one_node.url).wait(job_id, timeout=LIMIT_S + 10)
    finally:
        typist.kill()
    assert final["phase"] == "timeout" and final["reason"].startswith("InactiveLimit"), final


def test_a_quick_command_on_a_direct_link_agent_shows_its_output(tmp_path: Path) -> None:
    """Agents in the controller's process (``fusesched up``) relay over HTTP too; a command
    that ends at once (maybe before run attaches: its output waits in the relay) shows it."""
    with local_cluster(tmp_path / "data", lambda c: c[:1], agent_link="direct") as cluster:
        typist = Typist(cluster, "--pty", "sh", "-c", "tty; exit 4")
        code, shown = typist.finish(60)
    assert code == 4, shown
    assert b"/dev/pts/" in shown
