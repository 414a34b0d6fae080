"""``fusesched sacct``'s job steps, pure: a job's tasks grouped into ``ID.batch`` and ``ID.N``
rows of its latest run, their states, exit codes, times, nodes and usage, the fields a step
leaves blank, ``Restarts``, and ``-j ID.N``."""

from __future__ import annotations

from typing import Any

import pytest

from fusesched.cli import sacct_format as sf
from fusesched.cli import sacct_steps as st
from fusesched.model.phases import OOM_REASON

NOW = 1_000_000.0


def task(
    task_id: str,
    node: str = "n1",
    start: float = NOW - 90,
    end: float | None = NOW - 30,
    code: int | None = 0,
    step: int | None = None,
    **extra: Any,
) -> dict[str, Any]:
    group = "remote" if ".remote." in task_id else task_id.rsplit(".", 2)[1]
    return {
        "task_id": task_id,
        "node": node,
        "group": group,
        "state": "Running" if end is None else ("Completed" if code == 0 else "Failed"),
        "exit_code": code,
        "start_time": start,
        "end_time": end,
        "step_id": step,
        **extra,
    }


def job(tasks: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "7",
        "name": "train",
        "user": "alice",
        "tenant": "physics",
        "queue": "cpu",
        "state": "Failed",
        "phase": "failed",
        "exit_code": 3,
        "reason": "",
        "priority": 2,
        "cpus": 4.0,
        "nodes": ["n1", "n2"],
        "submit_time": NOW - 100,
        "start_time": NOW - 90,
        "end_time": NOW - 20,
        "time_limit_s": 600.0,
        "batch": True,
        "restarts": 0,
        "tasks": tasks,
    }
    base.update(fields)
    return base


#: A batch script (exit 3) that ran step 0 (two tasks on n1 and n2, one exiting 3) and step 1
#: (one task, an MPI step's mpirun and its daemon).
TASKS = [
    task("7.main.0", code=3, end=NOW - 20, cpu_seconds=1.5, max_rss_bytes=2048),
    task("7.remote.1", start=NOW - 80, end=NOW - 70, step=0, cpu_seconds=2.0, max_rss_bytes=10),
    task("7.remote.2", "n2", start=NOW - 79, end=NOW - 60, code=3, step=0, max_rss_bytes=5000),
    task("7.remote.3", start=NOW - 50, end=NOW - 40, step=1),
    task("7.remote.4", "n2", start=NOW - 49, end=NOW - 41, step=1),
]

FORMAT = "JobID,JobName,User,Partition,Account,State,ExitCode,Start,End,Elapsed"


def table(the_job: dict[str, Any], fmt: str = FORMAT, names: set[str] | None = None) -> dict:
    columns = sf.parse_format(fmt)
    out = {}
    for view, usage in st.step_rows(the_job, sf.sacct_state(the_job), names):
        out[view["id"]] = sf.values(columns, view, usage, NOW)
    return out


def test_a_batch_job_shows_its_script_and_each_srun_step() -> None:
    shown = table(job(TASKS), "JobID,JobName,User,Partition,Account,State,ExitCode,Timelimit")
    assert shown == {
        "7.batch": ["7.batch", "batch", "", "", "physics", "FAILED", "3:0", ""],
        "7.0": ["7.0", "", "", "", "physics", "FAILED", "3:0", ""],
        "7.1": ["7.1", "", "", "", "physics", "COMPLETED", "0:0", ""],
    }
    fields = "JobID,NNodes,NTasks,NodeList,AllocNodes,ElapsedRaw,TotalCPU,MaxRSS,AllocCPUS"
    usage = table(job(TASKS), fields)
    assert usage["7.batch"][1:] == ["1", "1", "n1", "1", "70", "00:01.500", "2K", "2"]
    # step 0: its earliest start to its latest end; CPU time summed, the highest task's RSS
    # (Slurm's forms: CPU time without milliseconds as HH:MM:SS, 5000 bytes as bytes)
    assert usage["7.0"][1:] == ["2", "2", "n[1-2]", "2", "20", "00:00:02", "5000", "4"]
    assert usage["7.1"][1:7] == ["2", "2", "n[1-2]", "2", "10", ""]  # (not sampled)


def test_a_step_is_named_as_srun_named_it() -> None:
    named = [
        task("7.main.0"),
        task("7.remote.1", step=0, step_name="train.py"),
        task("7.remote.2", step=0, step_name="train.py"),
        task("7.remote.3", step=1),  # an mpirun's daemon (unnamed) after its named mpirun
        task("7.remote.4", step=1, step_name="solver"),
        task("7.remote.5", step=2),  # stored before steps were named
    ]
    shown = table(job(named), "JobID,JobName")
    assert [row[1] for row in shown.values()] == ["batch", "train.py", "solver", ""]


def test_a_job_without_a_batch_script_shows_only_its_steps() -> None:
    tasks = [task("8.main.0"), task("8.main.1", "n2"), task("8.remote.1", step=0)]
    assert list(table(job(tasks, id="8", batch=False))) == ["8.0"]
    assert table(job([], state="Pending", phase="queued", start_time=None)) == {}


def test_only_the_latest_run_is_shown() -> None:
    earlier = [
        task("7.main.0", start=NOW - 500, end=NOW - 400, code=-15),
        task("7.remote.1", start=NOW - 450, end=NOW - 400, code=-15, step=0),
    ]
    latest = [task("7-r1.main.0", start=NOW - 90, end=None), task("7.remote.2", step=0, end=None)]
    running = job([*earlier, *latest], state="Running", phase="running", end_time=None)
    shown = table(running, "JobID,State,ExitCode,Start")
    assert shown == {
        "7.batch": ["7.batch", "RUNNING", "0:0", shown["7.batch"][3]],
        "7.0": ["7.0", "RUNNING", "0:0", shown["7.0"][3]],
    }
    assert sf.values(sf.parse_format("End"), *table_row(running, "0", latest), NOW) == ["Unknown"]
    requeued = job([*earlier], state="Pending", phase="queued", restarts=1)
    assert table(requeued) == {}  # (waiting again: its earlier run is over)


def table_row(the_job: dict[str, Any], name: str, tasks: list[dict[str, Any]]) -> tuple:
    return st.step_view(the_job, st.summarise(name, tasks), sf.sacct_state(the_job))


@pytest.mark.parametrize(
    ("codes", "job_state", "state", "exit_code"),
    [
        ([0, 0], "COMPLETED", "COMPLETED", "0:0"),
        ([0, 3], "FAILED", "FAILED", "3:0"),
        ([2, -15], "FAILED", "FAILED", "2:0"),
        ([0, -11], "COMPLETED", "FAILED", "0:11"),  # (a crash)
        ([0, -15], "COMPLETED", "CANCELLED", "0:15"),  # (stopped: srun signalled)
        ([-9, -15], "CANCELLED", "CANCELLED", "0:15"),
        ([-10, 0], "TIMEOUT", "CANCELLED", "0:10"),  # (its job's end stopped it)
        ([-9, 0], "OUT_OF_MEMORY", "OUT_OF_MEMORY", "0:9"),
        ([-1, 0], "NODE_FAIL", "NODE_FAIL", "0:0"),
        ([-1, 0], "COMPLETED", "CANCELLED", "0:0"),  # (the controller ended it)
        ([None, 0], "CANCELLED", "CANCELLED", "0:0"),  # (ended with no exit status)
    ],
)
def test_step_states_and_exit_codes(
    codes: list[int | None], job_state: str, state: str, exit_code: str
) -> None:
    step = st.summarise("0", [task(f"7.remote.{i}", code=c, step=0) for i, c in enumerate(codes)])
    assert st.step_state(step, job_state) == state
    assert sf.exit_code({"exit_code": step["exit_code"]}) == exit_code


def test_a_step_the_oom_killer_killed_in_is_out_of_memory_whatever_its_exit() -> None:
    """As Slurm's step whose cgroup had an oom-kill event: a batch script whose child was
    killed exits 137 (or goes on and exits 0), yet its row is ``OUT_OF_MEMORY 0:125``; so
    is an ``srun`` step's in a job that did not end for memory."""
    oom = {"reason": OOM_REASON}
    batch = st.summarise("batch", [task("7.main.0", code=137, **oom)])
    assert batch["oom"] and st.step_state(batch, "OUT_OF_MEMORY") == "OUT_OF_MEMORY"
    later = st.summarise("0", [task("7.remote.1", code=0, step=0, **oom), task("7.remote.2")])
    assert st.step_state(later, "COMPLETED") == "OUT_OF_MEMORY"
    tasks = [task("7.main.0", code=0), task("7.remote.1", code=0, step=0, **oom)]
    shown = table(job(tasks), "JobID,State,ExitCode")
    assert shown["7.0"] == ["7.0", "OUT_OF_MEMORY", "0:125"]
    assert shown["7.batch"] == ["7.batch", "COMPLETED", "0:0"]
    plain = st.summarise("0", [task("7.remote.1", code=137, step=0, reason="walltime exceeded")])
    assert not plain["oom"] and st.step_state(plain, "FAILED") == "FAILED"


def test_a_step_stopped_because_its_job_ended_out_of_memory_is_cancelled() -> None:
    """Only the agent's own OOM reason marks a task killed in: a step's task the controller
    stopped because its job's script died of memory carries that reason inside its stop's
    (``memory limit exceeded (killed by the kernel's OOM killer): retry budget of 2 restarts
    exhausted``), and its step is ``CANCELLED`` as Slurm's, not ``OUT_OF_MEMORY``."""
    stop = f"{OOM_REASON}: retry budget of 2 restarts exhausted"
    step = st.summarise("0", [task("7.remote.1", code=-15, step=0, reason=stop)])
    assert not step["oom"] and st.step_state(step, "OUT_OF_MEMORY") == "CANCELLED"


def test_a_task_left_running_by_its_jobs_end() -> None:
    step = st.summarise("0", [task("7.remote.1", end=None, code=None, step=0)])
    assert st.step_state(step, "RUNNING") == "RUNNING"
    assert st.step_state(step, "TIMEOUT") == "CANCELLED"
    assert st.step_state(step, "NODE_FAIL") == "NODE_FAIL"
    assert step["exit_code"] is None


def test_restarts_and_the_fields_a_step_leaves_blank() -> None:
    columns = sf.parse_format("Restarts,Priority,ReqCPUS,QOS,ReqMem")
    assert sf.needs_detail(columns) and not sf.needs_detail(sf.parse_format("JobID"))
    assert sf.values(columns, job([], restarts=2, qos="high"), {"memory_bytes": 2**30}, NOW) == [
        "2",
        "2",
        "4",
        "high",
        "1G",
    ]
    assert sf.values(columns, job([], restarts=None), {}, NOW)[0] == ""  # (not asked for)
    view, usage = st.step_view(job(TASKS), st.summarise("0", TASKS[1:3]), "FAILED")
    # (ReqCPUS: the step's own CPUs, as Slurm's step rows show)
    assert sf.values(columns, view, usage, NOW) == ["", "", "4", "", ""]


def test_selecting_steps_with_jobs() -> None:
    ids, picks = st.parse_job_steps(["12,13.0,13.batch", "14_2.1,14_2", "15.03", "16.extern"])
    assert ids == ["12", "13", "14_2", "15", "16"]
    assert picks == {"12": None, "13": {"0", "batch"}, "14_2": None, "15": {"3"}, "16": {"extern"}}
    assert st.picked(picks, {"id": "12"}) is None
    assert st.picked(picks, {"id": "13"}) == {"0", "batch"}
    assert st.picked(picks, {"id": "15_4", "array_parent": "15"}) == {"3"}
    assert st.picked({}, {"id": "99"}) is None  # (no -j: everything)
    assert list(table(job(TASKS), names={"batch", "1"})) == ["7.batch", "7.1"]
    assert table(job(TASKS), names={"extern"}) == {}
    for bad, said in [
        ("12.x", "bad job step 'x' in '12.x'"),
        ("12.", "bad job step '' in '12.'"),
        (".0", "bad job id '.0'"),
        ("12,,13", "an empty job id"),
        ("1x.0", "bad job id '1x'"),
    ]:
        with pytest.raises(ValueError, match=said.replace(".", r"\.")):
            st.parse_job_steps([bad])
