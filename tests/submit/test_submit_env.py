"""The submitting shell's environment, which a batch job inherits as with Slurm's default
``--export=ALL``: what is carried (model/submit_env.py), and ``--export``/``SBATCH_EXPORT``
with it (submit/sbatch.py, submit/sbatch_options.py)."""

from __future__ import annotations

import pytest

from fusesched.model.submit_env import (
    MAX_ENV_BYTES,
    carried_env,
    env_problem,
    text_environ,
)
from fusesched.submit.errors import SubmitError
from fusesched.submit.request import ParsedJob, parse_request
from fusesched.submit.sbatch import parse_sbatch

SHELL = {
    "PATH": "/opt/conda/envs/ml/bin:/usr/bin:/bin",
    "VIRTUAL_ENV": "/home/ana/venv",
    "LD_LIBRARY_PATH": "/opt/cuda/lib64",
    "BASH_FUNC_module%%": "() {  eval $(/usr/bin/modulecmd bash $*)\n}",
    "HOME": "/home/ana",
    "USER": "ana",
    "PWD": "/home/ana/runs",
    "TMPDIR": "/tmp/ana",
    "SLURM_JOB_ID": "77",
    "FUSESCHED_TOKEN": "secret",
    "FUSESCHED_CONTROLLER": "http://c:8642",
    "CUDA_VISIBLE_DEVICES": "0",
    "OMPI_COMM_WORLD_RANK": "3",
    "XDG_RUNTIME_DIR": "/run/user/1000",
    "EDITOR": "vi",
}


def parsed(
    directives: str, args: list[str] | None = None, env: dict[str, str] | None = None
) -> ParsedJob:
    return parse_sbatch(
        "#!/bin/sh\n" + directives + "\n./run\n", source="s.sh", args=args or [], submit_env=env
    )


def test_what_is_carried() -> None:
    carried = carried_env(SHELL)
    assert carried == {
        "BASH_FUNC_module%%": SHELL["BASH_FUNC_module%%"],
        "EDITOR": "vi",
        "LD_LIBRARY_PATH": "/opt/cuda/lib64",
        "PATH": "/opt/conda/envs/ml/bin:/usr/bin:/bin",
        "VIRTUAL_ENV": "/home/ana/venv",
    }
    assert list(carried) == sorted(carried)


def test_a_job_inherits_the_shell_by_default() -> None:
    job = parsed("#SBATCH -n 1", env=SHELL)
    assert job.request.submit_env == carried_env(SHELL)
    assert job.request.groups[0].env == {}
    assert job.warnings == ()


def test_no_environment_known_carries_nothing() -> None:
    job = parsed("#SBATCH -n 1")
    assert job.request.submit_env is None
    assert "submit_env" not in job.request.model_dump(mode="json")  # (older controllers)


@pytest.mark.parametrize(
    ("value", "carried", "env"),
    [
        ("ALL", True, {}),
        ("NONE", False, {}),
        ("NIL", False, {}),
        ("ALL,A=1", True, {"A": "1"}),
        ("A=1", False, {"A": "1"}),
        ("NONE,EDITOR", False, {"EDITOR": "vi"}),
        ("EDITOR,B=2", False, {"EDITOR": "vi", "B": "2"}),
        ("ALL,HOME", True, {"HOME": "/home/ana"}),  # (named: carried, even if not by default)
    ],
)
def test_export_with_the_shell(value: str, carried: bool, env: dict[str, str]) -> None:
    job = parsed(f"#SBATCH --export={value}", env=SHELL)
    assert (job.request.submit_env is not None) == carried
    assert job.request.groups[0].env == env
    assert job.warnings == ()


def test_a_bare_name_that_is_not_set_is_warned_of() -> None:
    job = parsed("", ["--export=NONE,NOPE"], env=SHELL)
    assert job.request.groups[0].env == {}
    assert job.warnings == (
        "command line: --export: NOPE is not set here, so the job does not get it",
    )


def test_the_command_line_wins_then_sbatch_export_then_the_script() -> None:
    shell = SHELL | {"SBATCH_EXPORT": "NONE,EDITOR"}
    job = parsed("#SBATCH --export=ALL", env=shell)  # (the environment over the script)
    assert job.request.submit_env is None and job.request.groups[0].env == {"EDITOR": "vi"}
    job = parsed("#SBATCH --export=NONE", ["--export=ALL"], env=shell)  # (the command line)
    assert job.request.submit_env == carried_env(shell)
    assert "SBATCH_EXPORT" not in (job.request.submit_env or {})


def test_a_bad_sbatch_export_names_the_variable() -> None:
    with pytest.raises(SubmitError, match=r"SBATCH_EXPORT \(in the environment\): NIL takes no"):
        parsed("", env=SHELL | {"SBATCH_EXPORT": "NIL,A=1"})


def test_nil_takes_no_variables() -> None:
    with pytest.raises(SubmitError, match="NIL takes no variables"):
        parsed("", ["--export=NIL,A=1"], env=SHELL)


def test_too_large_an_environment_is_refused_with_the_way_out() -> None:
    big = {f"BIG{i}": "x" * 100_000 for i in range(MAX_ENV_BYTES // 100_000 + 1)}
    with pytest.raises(SubmitError, match=r"use --export=NONE,NAME=value"):
        parsed("", env=big)
    job = parsed("", ["--export=NONE,A=1"], env=big)  # (nothing carried: accepted)
    assert job.request.submit_env is None


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"": "x"}, "invalid environment variable name ''"),
        ({"A=B": "x"}, "invalid environment variable name 'A=B'"),
        ({"A": "x\0y"}, "a value cannot hold a NUL"),
        ({f"V{i}": "" for i in range(10_001)}, "10001 variables: at most 10000"),
        # (JSON's "\udc80" escape: no agent could be sent it — the node's heartbeat failed)
        ({"A": "caf\udce9"}, "not UTF-8 text"),
        ({"\ud800": "x"}, "not UTF-8 text"),
    ],
)
def test_env_problems(environ: dict[str, str], message: str) -> None:
    problem = env_problem(environ)
    assert problem is not None and message in problem
    with pytest.raises(ValueError, match="submit_env"):
        parse_request(
            {"name": "j", "submit_env": environ, "groups": [{"name": "m", "argv": ["true"]}]}
        )


def test_text_environ_keeps_only_text() -> None:
    raw = {"B": "2", "A": "1", "BAD": "caf\udce9", "\udcff": "x", "": "e"}
    assert text_environ(raw) == {"A": "1", "B": "2"}
    assert list(text_environ(raw)) == ["A", "B"]


def test_input_variables_stand_for_options_between_script_and_command_line() -> None:
    shell = SHELL | {
        "SBATCH_PARTITION": "gpu",
        "SBATCH_TIMELIMIT": "10",
        "SBATCH_JOB_NAME": "from-env",
        "SBATCH_NO_REQUEUE": "1",
        "SBATCH_MEM_PER_NODE": "2G",
    }
    job = parsed("#SBATCH -p cpu\n#SBATCH -t 5\n#SBATCH -J script", ["-J", "cli"], env=shell)
    request = job.request
    assert (request.queue, request.walltime_s, request.name) == ("gpu", 600, "cli")
    assert request.requeue is False
    assert request.groups[0].resources["memory"] == "2Gi"
    assert parsed("#SBATCH -p cpu", env=SHELL).request.queue == "cpu"  # (none set)


def test_run_takes_no_sbatch_input_variables() -> None:
    shell = SHELL | {"SBATCH_PARTITION": "gpu", "SBATCH_EXPORT": "NONE"}
    job = parse_sbatch(
        "", source="run", args=["--wrap=true"], submit_env=shell, input_variables=False
    )
    assert job.request.queue != "gpu" and job.request.submit_env is not None


def test_a_bad_input_variable_is_an_error_not_a_traceback() -> None:
    with pytest.raises(SubmitError, match="--time"):
        parsed("", env=SHELL | {"SBATCH_TIMELIMIT": "soon"})


@pytest.mark.parametrize(
    ("env", "args", "said"),
    [  # (the variable is named, not the command line, which gave no such option)
        ({"SBATCH_TIMELIMIT": "soon"}, [], r"^SBATCH_TIMELIMIT \(in the environment\): --time: "),
        ({"SBATCH_OPEN_MODE": "x"}, [], r"^SBATCH_OPEN_MODE \(in the environment\): "),
        ({"SBATCH_GPUS": "1"}, ["--gres=gpu:1"], r"^SBATCH_GPUS \(in the environment\): "),
        ({"SBATCH_TIMELIMIT": "5"}, ["--time=soon"], r"^command line: --time: "),  # (its own)
        ({"SBATCH_TIMELIMIT": "5"}, ["-t", "soon"], r"^command line: -t: "),
    ],
)
def test_a_bad_input_variable_is_named(env: dict[str, str], args: list[str], said: str) -> None:
    with pytest.raises(SubmitError, match=said):
        parsed("", args, env=SHELL | env)


def test_every_input_variable_names_an_option_sbatch_reads() -> None:
    from fusesched.submit.sbatch_environment import INPUT_VARIABLES
    from fusesched.submit.sbatch_reader import FLAG_OPTIONS, VALUE_OPTIONS

    for option in INPUT_VARIABLES.values():
        assert option[2:] in VALUE_OPTIONS | FLAG_OPTIONS, option


def test_one_variable_longer_than_linux_takes_is_refused() -> None:
    assert env_problem({"V": "x" * 131_069}) is None  # (V=…: 131,071 bytes)
    problem = env_problem({"V": "x" * 131_070})
    assert problem is not None and "at most 131071" in problem


def test_an_enclosing_torchrun_or_mpi_launch_is_not_carried() -> None:
    launched = {"RANK": "3", "PET_NNODES": "2", "MASTER_ADDR": "n1", "PRTE_X": "1", "KEEP": "1"}
    assert carried_env(launched) == {"KEEP": "1"}
