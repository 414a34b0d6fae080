"""The Slurm back end's mapping (fusesched job → sbatch, squeue/sinfo JSON → states, nodes).

Pure functions, no Slurm needed; tests/live/test_slurm_pool.py runs jobs through a real one.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from fusesched.backends.base import (
    BackendRejected,
    BackendUnavailable,
    RemoteJob,
    RemotePlacement,
    RemoteState,
)
from fusesched.backends.slurm import (
    SlurmBackend,
    SlurmOptions,
    account_for,
    batch_script,
    sbatch_args,
    slurm_time,
)
from fusesched.backends.slurm_json import LABEL_PARTITION, exit_code, parse_sinfo, parse_squeue
from fusesched.model.node import LABEL_ARCH
from fusesched.model.resources import CPU, GPU, MEMORY, Resources
from fusesched.submit.request import JobRequest

GIB = 1024**3


def job(
    tasks: dict[str, int] | None = None,
    per_task: dict[str, int] | None = None,
    **fields: Any,
) -> RemoteJob:
    group = {"resources": {"cpu": 1}, "argv": ["echo", "hi"]}
    group.update(fields.pop("group", {}))
    request = JobRequest.model_validate(
        {"name": "demo", "user": "alice", "groups": [group], **fields}
    )
    placement = RemotePlacement(
        "main", tasks or {"n1": 1}, Resources(per_task or {CPU: 1000, MEMORY: GIB})
    )
    return RemoteJob("42", request, (placement,), {"FUSESCHED_JOB_ID": "42"})


@pytest.fixture
def options(tmp_path: Path) -> SlurmOptions:
    return SlurmOptions(log_dir=tmp_path, partition="debug", default_user="nobody")


def flags(args: list[str]) -> dict[str, str]:
    return dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)


def test_single_task_options(options: SlurmOptions, tmp_path: Path) -> None:
    args = sbatch_args(job(walltime_s=90), options, tmp_path / "42.sbatch")
    f = flags(args)
    assert args[0] == "sbatch" and "--parsable" in args and args[-1].endswith("42.sbatch")
    assert f["job-name"] == "demo" and f["comment"] == "fusesched:42"
    assert f["ntasks"] == "1" and f["nodes"] == "1" and f["nodelist"] == "n1"
    assert f["cpus-per-task"] == "1" and f["mem-per-cpu"] == "1024M"
    assert f["time"] == "0:02:00"  # 90 s rounded up to whole minutes
    assert f["partition"] == "debug" and f["output"] == str(tmp_path / "42" / "out")
    assert f["chdir"] == str(tmp_path / "42")  # the run's own folder
    assert "--no-requeue" in args and "--exclusive" not in args


@pytest.mark.parametrize(
    ("fields", "chdir"),
    [
        ({"submit_dir": "/home/ann/run"}, "/home/ann/run"),  # where sbatch or run ran
        ({"submit_dir": "/home/ann", "group": {"workdir": "run"}}, "/home/ann/run"),  # -D, in it
        ({"submit_dir": "/home/ann", "group": {"workdir": "/scratch"}}, "/scratch"),  # -D wins
        ({"group": {"workdir": "/scratch"}}, "/scratch"),
    ],
)
def test_the_job_starts_in_its_submit_folder(
    options: SlurmOptions, tmp_path: Path, fields: dict[str, Any], chdir: str
) -> None:
    submitted = job(**fields)
    assert flags(sbatch_args(submitted, options, tmp_path / "s"))["chdir"] == chdir
    exported = "export SLURM_SUBMIT_DIR=" in batch_script(submitted, {"wrapper": tmp_path / "w"})
    assert exported == ("submit_dir" in fields)  # (Slurm's: the controller's own folder)


def test_the_job_is_told_the_host_it_was_submitted_from(tmp_path: Path) -> None:
    files = {"wrapper": tmp_path / "w"}
    hosted = batch_script(job(submit_host="login-1", slurm_env=True), files)
    assert "export SLURM_SUBMIT_HOST=login-1\n" in hosted  # (Slurm's: the controller's host)
    assert "SLURM_SUBMIT_HOST" not in batch_script(job(), files)


def test_licenses_go_to_slurm(options: SlurmOptions, tmp_path: Path) -> None:
    licensed = job(licenses={"matlab": 2, "ansys": 1})
    assert flags(sbatch_args(licensed, options, tmp_path / "s"))["licenses"] == "ansys:1,matlab:2"
    assert not any(a.startswith("--licenses") for a in sbatch_args(job(), options, tmp_path / "s"))


def test_gang_gpus_and_exclusive(options: SlurmOptions, tmp_path: Path) -> None:
    gang = job(
        tasks={"n1": 2, "n2": 2},
        per_task={CPU: 2500, MEMORY: 3 * GIB, GPU: 1},
        placement={"exclusive": True},
    )
    f = flags(sbatch_args(gang, options, tmp_path / "s"))
    assert f["ntasks"] == "4" and f["nodes"] == "2" and f["nodelist"] == "n1,n2"
    assert f["ntasks-per-node"] == "2" and f["cpus-per-task"] == "3"
    assert f["mem-per-cpu"] == "1024M" and f["gpus-per-task"] == "1"
    assert "--exclusive" in sbatch_args(gang, options, tmp_path / "s")


def test_the_warning_before_the_time_limit(options: SlurmOptions, tmp_path: Path) -> None:
    def signal_flag(**fields: Any) -> str | None:
        return flags(sbatch_args(job(**fields), options, tmp_path / "s")).get("signal")

    warned = {"walltime_s": 600, "signal": {"name": "USR1", "before_s": 89.5}}
    assert signal_flag(**warned) == "B:USR1@90"  # one process: the batch shell execs it
    assert signal_flag(**warned, tasks={"n1": 2, "n2": 2}) == "USR1@90"  # srun's tasks
    batch = {**warned, "signal": "B:TERM@30"}
    assert signal_flag(**batch, tasks={"n1": 2}) == "B:TERM@30"  # main_only: the shell
    # a batch script: without B: its steps are warned, not its shell, as Slurm does it
    script = {"group": {"argv": [], "script": "#!/bin/sh\nsrun python train.py\n"}}
    assert signal_flag(**warned, **script) == "USR1@90"
    assert signal_flag(**batch, **script) == "B:TERM@30"
    assert signal_flag(signal="USR2@30") is None  # no time limit: nothing to warn about
    assert signal_flag(walltime_s=600) is None


@pytest.mark.parametrize(
    ("per_task", "message"),
    [
        ({CPU: 1000, "fpga": 1}, "fpga have no Slurm mapping"),
        ({CPU: 1000, "nvidia.com/mig-1g.10gb": 1}, "mig-1g.10gb have no Slurm mapping"),
    ],
)
def test_unmapped_resources_are_rejected(
    options: SlurmOptions, tmp_path: Path, per_task: dict[str, int], message: str
) -> None:
    with pytest.raises(BackendRejected, match=message):
        sbatch_args(job(per_task=per_task), options, tmp_path / "s")


def test_several_groups_are_rejected(options: SlurmOptions, tmp_path: Path) -> None:
    two = job()
    two = RemoteJob(two.job_id, two.request, two.placements * 2)
    with pytest.raises(BackendRejected, match="several task groups"):
        sbatch_args(two, options, tmp_path / "s")


def test_never_root(tmp_path: Path) -> None:
    with pytest.raises(BackendRejected, match="never run as root"):
        account_for("alice", SlurmOptions(log_dir=tmp_path, users={"alice": "root"}))
    with pytest.raises(BackendRejected, match="no account on this Slurm cluster"):
        account_for("nobody-such-user", SlurmOptions(log_dir=tmp_path))
    assert account_for("nobody-such-user", SlurmOptions(log_dir=tmp_path, default_user="x")) == "x"


def test_script_quotes_every_word(tmp_path: Path) -> None:
    """Shell metacharacters in argv and env reach the program literally."""
    nasty = job(
        group={"argv": ["printf", "%s\\n", "a; rm -rf / $(id) `x` 'q'"], "env": {"V": "$(id)"}}
    )
    script = batch_script(nasty, {"wrapper": tmp_path / "w"})
    path = tmp_path / "s.sh"
    path.write_text(script.replace("exec printf", "exec printf"))
    out = subprocess.run(["bash", str(path)], capture_output=True, text=True, check=True)
    assert out.stdout == "a; rm -rf / $(id) `x` 'q'\n"
    assert "export V='$(id)'" in script


def test_several_tasks_run_through_srun(tmp_path: Path) -> None:
    gang = job(tasks={"n1": 2})
    script = batch_script(gang, {"wrapper": tmp_path / "task.sh"})
    last = shlex.split(script.strip().splitlines()[-1])
    assert last[:4] == ["exec", "srun", "--ntasks=2", str(tmp_path / "task.sh")]
    assert last[4:] == ["echo", "hi"]
    once = job(tasks={"n1": 2}, group={"launcher": "mpi", "argv": ["mpirun", "a.out"]})
    assert batch_script(once, {"wrapper": tmp_path / "t"}).strip().endswith("exec mpirun a.out")


def test_user_script_runs_from_its_file(tmp_path: Path) -> None:
    scripted = job(group={"argv": [], "script": "#!/bin/bash\n#SBATCH -N 9\necho x\n"})
    script = batch_script(scripted, {"script": tmp_path / "u", "wrapper": tmp_path / "w"})
    assert script.strip().endswith(f"exec {tmp_path / 'u'}")
    assert "#SBATCH" not in script


@pytest.mark.parametrize(
    ("seconds", "value"), [(1, "0:01:00"), (60, "0:01:00"), (61, "0:02:00"), (7200, "2:00:00")]
)
def test_time(seconds: float, value: str) -> None:
    assert slurm_time(seconds) == value


@pytest.mark.parametrize(("raw", "code"), [(0, 0), (768, 3), (9, 137), (15, 143), (None, None)])
def test_exit_codes(raw: int | None, code: int | None) -> None:
    assert exit_code(raw) == code


SQUEUE = {
    "jobs": [
        {"job_id": 1, "job_state": "PENDING", "state_reason": "Resources", "exit_code": 0},
        {"job_id": 2, "job_state": "RUNNING", "start_time": 100, "nodes": "n1,n2", "exit_code": 0},
        {"job_id": 3, "job_state": "COMPLETED", "start_time": 100, "end_time": 160, "exit_code": 0},
        {"job_id": 4, "job_state": "FAILED", "state_reason": "NonZeroExitCode", "exit_code": 768},
        {"job_id": 5, "job_state": "TIMEOUT", "exit_code": 0},
        {"job_id": 6, "job_state": "CANCELLED", "exit_code": 15},
        {"job_id": 7, "job_state": "NODE_FAIL", "exit_code": 0},
        {"job_id": 99, "job_state": "RUNNING"},
    ]
}


def test_squeue_states() -> None:
    got = {s.external_id: s for s in parse_squeue(SQUEUE, [str(i) for i in range(1, 8)])}
    assert "99" not in got
    assert got["1"].state is RemoteState.PENDING and "Resources" in got["1"].reason
    assert got["2"].state is RemoteState.RUNNING and got["2"].nodes == ("n1", "n2")
    assert got["2"].start_time == 100 and got["2"].exit_code is None
    assert (got["3"].state, got["3"].exit_code, got["3"].end_time) == (
        RemoteState.SUCCEEDED,
        0,
        160,
    )
    assert (got["4"].state, got["4"].exit_code) == (RemoteState.FAILED, 3)
    assert got["5"].timed_out and got["5"].exit_code == 1
    assert got["6"].state is RemoteState.CANCELLED
    assert got["7"].state is RemoteState.FAILED and got["7"].exit_code == 1


#: ``squeue --json --states=all``'s record of a ``--no-requeue`` job whose node went down under
#: it, from a real Slurm 22.05.8 (slurmd killed, ``scontrol update state=down``), keys trimmed
NODE_FAIL_22_05 = {
    "job_id": 31,
    "job_state": "NODE_FAIL",
    "state_reason": "NodeDown",
    "state_description": "",
    "exit_code": 0,
    "derived_exit_code": 0,
    "nodes": "nfnode",
    "start_time": 1796621503,
    "end_time": 1796621537,
    "requeue": False,
}
#: The same as later versions write it: squeue's state list (base state first, then flags)
#: and exit code object (slurmctld sets exit code 1, a signal 1 in a wait status, on a node
#: failure), sacct's ``state.current``
NODE_FAIL_LATER = {
    "job_id": 32,
    "job_state": ["NODE_FAIL", "COMPLETING"],
    "state_reason": "NodeDown",
    "exit_code": {
        "status": ["SIGNALED"],
        "return_code": {"set": True, "infinite": False, "number": 0},
        "signal": {"id": {"set": True, "infinite": False, "number": 1}, "name": "HUP"},
    },
}
NODE_FAIL_SACCT = {"job_id": 33, "state": {"current": ["NODE_FAIL"], "reason": "NodeDown"}}


def test_node_fail_is_told_apart_from_other_failures() -> None:
    """Slurm's NODE_FAIL, in each layout, is a failure marked ``node_failed`` (the controller
    ends the job with the ``NodeDown: `` reason); other failures are not."""
    data = {"jobs": [NODE_FAIL_22_05, NODE_FAIL_LATER, NODE_FAIL_SACCT]}
    got = {s.external_id: s for s in parse_squeue(data, ["31", "32", "33"])}
    for external in ("31", "32", "33"):
        status = got[external]
        assert status.state is RemoteState.FAILED and status.node_failed, status
    assert got["31"].reason == "slurm node_fail (NodeDown)" and got["31"].end_time == 1796621537
    assert not any(s.node_failed for s in parse_squeue(SQUEUE, ["4", "5", "6"]))


#: A job Slurm's cgroup OOM killer ended (squeue --json's layout as NODE_FAIL_22_05's)
OUT_OF_MEMORY = {
    **NODE_FAIL_22_05,
    "job_id": 34,
    "job_state": "OUT_OF_MEMORY",
    "state_reason": "OutOfMemory",
}


def test_out_of_memory_is_marked_so() -> None:
    (status,) = parse_squeue({"jobs": [OUT_OF_MEMORY]}, ["34"])
    assert status.state is RemoteState.FAILED and status.out_of_memory and not status.node_failed
    assert not any(s.out_of_memory for s in parse_squeue(SQUEUE, ["4", "5", "6"]))


def test_sacct_layout() -> None:
    data = {"jobs": [{"job_id": 8, "job_state": {"current": "COMPLETED"}, "exit_code": 0}]}
    assert parse_squeue(data, ["8"])[0].state is RemoteState.SUCCEEDED


def test_sinfo_nodes() -> None:
    data = {
        "nodes": [
            {
                "name": "c1",
                "cpus": 8,
                "real_memory": 16000,
                "gres": "gpu:a100:2(S:0-1)",
                "partitions": ["gpu", "debug"],
                "state": "mixed",
                "architecture": "aarch64",
                "active_features": "ib,fast",
            },
            {
                "name": "c2",
                "cpus": 4,
                "real_memory": 8000,
                "partitions": ["debug"],
                "state": "down",
            },
            {
                "name": "c3",
                "cpus": 4,
                "real_memory": 8000,
                "partitions": ["debug"],
                "state": "idle",
                "state_flags": ["DRAIN"],
            },
            {
                "name": "c4",
                "cpus": 4,
                "real_memory": 8000,
                "partitions": ["other"],
                "state": "idle",
            },
        ]
    }
    nodes = {n.name: n for n in parse_sinfo(data, "debug")}
    assert sorted(nodes) == ["c1", "c2", "c3"]
    c1 = nodes["c1"]
    assert c1.capacity.get(CPU) == 8000 and c1.capacity.get(GPU) == 2
    assert c1.capacity.get(MEMORY) == 16000 * 1024 * 1024 and c1.up
    assert c1.labels[LABEL_PARTITION] == "debug" and c1.labels[LABEL_ARCH] == "arm64"
    assert c1.labels["slurm.schedmd.com/feature.ib"] == "true"
    assert not nodes["c2"].up and not nodes["c3"].up


def test_errors_are_told_apart(tmp_path: Path) -> None:
    def down(argv: list[str], stdin: str | None, timeout: float) -> tuple[int, str, str]:
        return (
            1,
            "",
            "sbatch: error: Batch job submission failed: Unable to contact slurm controller",
        )

    def refuses(argv: list[str], stdin: str | None, timeout: float) -> tuple[int, str, str]:
        return 1, "", "sbatch: error: Batch job submission failed: Invalid partition name specified"

    opts = SlurmOptions(log_dir=tmp_path / "logs", default_user="nobody")
    with pytest.raises(BackendUnavailable, match="Unable to contact"):
        SlurmBackend(opts, down).submit(job())
    with pytest.raises(BackendRejected, match="Invalid partition"):
        SlurmBackend(opts, refuses).submit(job())
    with pytest.raises(BackendUnavailable):
        SlurmBackend(opts, refuses).nodes()  # sinfo failing at all: the cluster is unusable


def test_options_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown Slurm pool option"):
        SlurmOptions.parse({"partitoin": "x"}, tmp_path)
    with pytest.raises(ValueError, match="sbatch_args"):
        SlurmOptions.parse({"sbatch_args": "--x"}, tmp_path)
    parsed = SlurmOptions.parse({"partition": "p", "sbatch_args": ["--reservation=r"]}, tmp_path)
    assert parsed.partition == "p" and parsed.extra_args == ("--reservation=r",)
    if os.geteuid() == 0:
        assert "--reservation=r" in sbatch_args(
            job(),
            SlurmOptions(log_dir=tmp_path, default_user="nobody", extra_args=("--reservation=r",)),
            tmp_path / "s",
        )


@pytest.mark.skipif(os.geteuid() != 0, reason="handing files to another account needs root")
def test_run_files_belong_to_the_job_and_links_are_not_followed(tmp_path: Path) -> None:
    """Scripts are written fresh into a folder only the job's account can write; an output
    file swapped for a link (to read another file through the job's log) is not read."""
    import pwd

    logs = tmp_path / "logs"
    calls: list[list[str]] = []

    def accept(argv: list[str], stdin: str | None, timeout: float) -> tuple[int, str, str]:
        calls.append(argv)
        return 0, "77\n", ""

    opts = SlurmOptions(log_dir=logs, default_user="nobody")
    backend = SlurmBackend(opts, accept)
    scripted = job(group={"argv": [], "script": "echo hi\n"})
    assert backend.submit(scripted) == "77"
    nobody = pwd.getpwnam("nobody")
    folder = logs / "42"
    assert (logs.stat().st_mode & 0o777) == 0o755
    assert (folder.stat().st_uid, folder.stat().st_mode & 0o777) == (nobody.pw_uid, 0o700)
    assert (folder / "user-script").stat().st_uid == nobody.pw_uid
    assert f"--uid={nobody.pw_uid}" in calls[0] and f"--gid={nobody.pw_gid}" in calls[0]
    secret = tmp_path / "secret"
    secret.write_text("root only")
    (folder / "out").symlink_to(secret)
    assert backend.logs("77", scripted) == {}
    (folder / "out").unlink()
    os.link(secret, folder / "out")  # a hard link: not the job's own file either
    assert backend.logs("77", scripted) == {}


def test_unknown_account_is_refused(tmp_path: Path) -> None:
    from fusesched.backends.slurm import identity_for

    with pytest.raises(BackendRejected, match="unknown on the controller's host"):
        identity_for("alice", SlurmOptions(log_dir=tmp_path, default_user="no-such-account"))


def test_later_slurm_and_sacct_layouts() -> None:
    """Lists of state words and {"set", "number"} values (Slurm 23+), sacct's own keys."""
    later = {
        "jobs": [
            {
                "job_id": 1,
                "job_state": ["COMPLETED"],
                "exit_code": {"status": ["SUCCESS"], "return_code": {"set": True, "number": 0}},
                "start_time": {"set": True, "number": 100},
                "end_time": {"set": True, "number": 160},
            },
            {
                "job_id": 2,
                "job_state": ["FAILED", "REQUEUED"],
                "exit_code": {"return_code": {"set": True, "number": 3}},
            },
            {"job_id": 3, "state": {"current": ["CANCELLED"]}, "time": {"start": 5, "end": 9}},
            {"job_id": 4, "job_state": ["RUNNING"], "start_time": {"set": False, "number": 0}},
            {"job_id": 5, "job_state": "FAILED", "exit_code": {"signal": {"id": {"number": 9}}}},
        ]
    }
    got = {s.external_id: s for s in parse_squeue(later, ["1", "2", "3", "4", "5"])}
    assert (got["1"].state, got["1"].exit_code, got["1"].end_time) == (
        RemoteState.SUCCEEDED,
        0,
        160.0,
    )
    assert (got["2"].state, got["2"].exit_code) == (RemoteState.FAILED, 3)
    assert (got["3"].state, got["3"].end_time) == (RemoteState.CANCELLED, 9.0)
    assert got["4"].state is RemoteState.RUNNING and got["4"].start_time is None
    assert got["5"].exit_code == 137
    nodes = parse_sinfo(
        {
            "nodes": [
                {
                    "name": "a",
                    "cpus": 4,
                    "real_memory": 8000,
                    "partitions": ["p"],
                    "state": ["IDLE"],
                },
                {
                    "name": "b",
                    "cpus": 4,
                    "real_memory": 8000,
                    "partitions": ["p"],
                    "state": ["IDLE", "DRAIN"],
                },
            ]
        },
        "p",
    )
    assert [n.up for n in nodes] == [True, False]
