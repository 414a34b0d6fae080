"""Fixtures every test folder may use."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("COLUMNS") == "80":
    # pytest-xdist's workers inherit COLUMNS=80 from execnet; the CLI's consoles (and the
    # commands tests start) would then wrap long temporary paths, unlike a serial run.
    del os.environ["COLUMNS"]

for _signal in (signal.SIGINT, signal.SIGHUP):
    if signal.getsignal(_signal) is signal.SIG_IGN:
        # a run started in the background of a non-interactive shell ignores SIGINT (one
        # under nohup SIGHUP), and the commands tests start would inherit that: those that
        # test Ctrl-C or a hang-up need the signal at its default, as in a terminal
        signal.signal(_signal, signal.SIG_DFL)

FRONT_SOURCE = Path(__file__).resolve().parents[1] / "src" / "fusesched" / "cli" / "front.c"


def build_front(out_dir: Path, *defines: str) -> Path:
    """The native front of the ``fusesched`` command (``src/fusesched/cli/front.c``) built as
    ``make`` builds it, handing over to this interpreter's Python command (skips the test when
    there is no C compiler); ``defines`` are extra ``-D`` flags."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (cc): the native front cannot be built here")
    out = out_dir / "fusesched"
    flags = ["-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", *(f"-D{d}" for d in defines)]
    built = subprocess.run(
        [cc, *flags, "-o", str(out), str(FRONT_SOURCE), f'-DFUSESCHED_PYTHON="{sys.executable}"'],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    return out


@pytest.fixture(scope="session")
def native_front(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The native front, as ``make`` installs it at .venv/bin/fusesched."""
    return build_front(tmp_path_factory.mktemp("front"))
