"""The shim that takes a task's environment from its file under setpriv (agent/task_shim.py):
with bash as /bin/sh (RHEL-family nodes) too, a job variable bash keeps read-only does not
end the task, and the file (it holds the job's credential) is gone whatever happens."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from fusesched.agent.task_shim import _SHIM_CD, _SHIM_ENV, SHELL_READ_ONLY, _exports

SHOW = ("sh", "-c", 'echo "$SECRET|$UID_LIKE|$(pwd)"')
SHELLS = [s for s in (["dash"], ["bash", "--posix"]) if shutil.which(s[0])]


def run_shim(shell: list[str], env_file: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*shell, "-c", _SHIM_ENV, "fusesched-task", str(env_file), str(cwd), *SHOW],
        input="go\n",
        capture_output=True,
        text=True,
        timeout=10,
        env={"PATH": "/usr/bin:/bin"},
    )


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_the_environment_is_taken_and_its_file_removed(shell: list[str], tmp_path: Path) -> None:
    env_file = tmp_path / ".fusesched-env"
    env = {"SECRET": "it's $x", "UID_LIKE": "7", "UID": "0", "PPID": "1", "SHELLOPTS": "x"}
    env_file.write_text(_exports(env))
    done = run_shim(shell, env_file, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"it's $x|7|{tmp_path}\n"
    assert not env_file.exists()


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_file_that_cannot_be_read_through_is_removed_all_the_same(
    shell: list[str], tmp_path: Path
) -> None:
    env_file = tmp_path / ".fusesched-env"
    env_file.write_text("export 'SECRET=kept'\nexport 'UID=0'\n")  # (written by hand)
    done = run_shim(shell, env_file, tmp_path)
    if shell[0] == "bash":  # (UID is read-only: the shell ends at once, the task never runs)
        assert done.returncode != 0 and "readonly" in done.stderr, done.stderr
    assert not env_file.exists()


def test_read_only_names_are_left_out_of_the_file() -> None:
    text = _exports({name: "1" for name in SHELL_READ_ONLY} | {"KEPT": "1"})
    assert text == "export 'KEPT=1'\n"


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
@pytest.mark.parametrize("as_root", [False, True], ids=["agent-identity", "under-a-switch"])
def test_a_name_a_shell_cannot_export_reaches_the_task(as_root: bool, tmp_path: Path) -> None:
    """bash's exported functions (``module``, which ``module load`` needs, as a submitting
    shell holds it) and names such as ``A.B`` reach the task: dash, /bin/sh on Debian and
    Ubuntu, left them out of what the shim ``exec``\\ s."""
    from fusesched.agent.task_shim import shim_start

    env = {"PATH": "/usr/bin:/bin", "BASH_FUNC_f%%": "() {  echo f ran\n}", "A.B": "dotted"}
    command = ["bash", "-c", 'f; printf "%s\\n" "$(env | grep ^A.B=)"']
    start = shim_start(command, tmp_path, env, tmp_path, None, None, None)
    argv = start.argv
    if as_root:  # (the shim that enters the folder itself: its first argument)
        argv = [argv[0], "-c", _SHIM_CD, "fusesched-task", str(tmp_path), *command]
    done = subprocess.run(
        argv, input="go\n", capture_output=True, text=True, timeout=10, env=start.env, cwd="/"
    )
    assert done.stdout == "f ran\nA.B=dotted\n", (done.stdout, done.stderr)
