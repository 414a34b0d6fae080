"""A real Slurm client tool, unchanged, against fusesched: submitit (Meta's Slurm executor)
finds ``sbatch``, ``sacct``, ``scancel`` and ``srun`` on PATH where ``fusesched
slurm-commands install`` put them, submits Python functions as batch scripts (``#SBATCH
--signal=USR2@90``, ``--open-mode=append``, ``--wckey``, ``%j``/``%A_%a`` paths), runs them
through ``srun --unbuffered --output … --error …`` inside the job (the agent's srun), reads
their states through ``sacct -o JobID,State,NodeList --parsable2`` and cancels with
``scancel``; a ``Checkpointable`` warned before its time limit checkpoints, requeues its own
job and resumes. Then users' one-liners (``squeue -u $USER -h | wc -l``, ``scontrol show job ID |
grep JobState``, ``scontrol update JobId=ID TimeLimit=…``) and ``srun -o %t`` files."""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import cloudpickle
import pytest
import submitit
from submitit.core.utils import FailedJobError

from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

from .conftest import local_cluster

TIMEOUT_S = 30


@dataclass
class Tools:
    cluster: LocalCluster
    folder: Path  # shared by the jobs (they run under another uid)
    env: dict[str, str]  # PATH with the wrappers first, FUSESCHED_CONTROLLER

    def sh(self, line: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["/bin/sh", "-c", line],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            env=self.env,
            cwd=self.folder,
            check=False,
        )


def add(a: int, b: int) -> int:
    return a + b


def boom() -> None:
    raise ValueError("boom from the job")


def nap() -> None:
    time.sleep(60)


class Counter(submitit.helpers.Checkpointable):
    """Counts to ``steps`` a quarter of a second at a time; warned before its time limit, submitit
    checkpoints it (its count) and requeues its job, whose next run counts on."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, steps: int) -> tuple[int, str | None]:
        while self.count < steps:
            time.sleep(0.25)
            self.count += 1
        return self.count, os.environ.get("SLURM_RESTART_COUNT")


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tools]:
    data = tmp_path_factory.mktemp("slurm-tools") / "data"
    folder = Path(tempfile.mkdtemp(prefix="fusesched-tools-"))
    folder.chmod(0o1777)  # (the jobs run under an unprivileged uid: see the umask below)
    wrappers = folder / "bin"
    with (
        local_cluster(data, lambda agents: agents[:2]) as cluster,
        pytest.MonkeyPatch.context() as mp,
    ):
        installed = subprocess.run(
            [sys.executable, "-m", "fusesched", "slurm-commands", "install", str(wrappers)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
        assert installed.returncode == 0, installed.stderr
        mp.setenv("PATH", f"{wrappers}{os.pathsep}{os.environ['PATH']}")
        mp.setenv("FUSESCHED_CONTROLLER", cluster.url)
        mp.delenv("FUSESCHED_TOKEN", raising=False)
        mp.chdir(folder)
        # the jobs run as another uid than this root test: the folders submitit makes for them
        # must let it write its results (a user's own jobs run as that user: no need there)
        mask = os.umask(0)
        # the jobs' Python cannot import this test module: its functions travel by value
        cloudpickle.register_pickle_by_value(sys.modules[__name__])
        try:
            yield Tools(cluster, folder, dict(os.environ))
        finally:
            cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
            os.umask(mask)
            shutil.rmtree(folder, ignore_errors=True)


def executor(tools: Tools, **extra: object) -> submitit.AutoExecutor:
    ex = submitit.AutoExecutor(folder=tools.folder / "jobs" / "%j")
    assert ex.cluster == "slurm"  # (our srun first on PATH)
    ex.update_parameters(timeout_min=2, **extra)
    return ex


def _state(job: submitit.Job[object], wanted: str) -> str:
    deadline = time.monotonic() + TIMEOUT_S
    while (state := job.watcher.get_state(job.job_id, mode="force")) != wanted:
        assert time.monotonic() < deadline, (job.job_id, state)
        time.sleep(0.3)
    return state


def test_submitit_runs_functions_arrays_and_cancels(tools: Tools) -> None:
    ex = executor(tools)
    done = ex.submit(add, 2, 3)
    failed = ex.submit(boom)
    sleeper = ex.submit(nap)
    members = executor(tools, slurm_array_parallelism=2).map_array(add, [1, 2, 3], [10, 20, 30])
    assert done.job_id.isdigit() and [m.job_id.rpartition("_")[2] for m in members] == list("012")

    assert done.result() == 5
    assert _state(done, "COMPLETED") == "COMPLETED"  # (sacct -o JobID,State,NodeList -P)
    # the srun step's --output and --error files (%j_%t_log.out, .err), written by the task
    assert "Starting with JobEnvironment" in (done.stdout() or "")
    with pytest.raises(FailedJobError, match="ValueError: boom from the job"):
        failed.result()
    said = failed.stderr() or ""
    assert "ValueError: boom from the job" in said and "Starting with" not in said
    assert [m.result() for m in members] == [11, 22, 33]

    _state(sleeper, "RUNNING")
    sleeper.cancel()  # (scancel ID)
    assert _state(sleeper, "CANCELLED") == "CANCELLED"


def test_submitit_checkpoints_and_requeues_before_the_time_limit(tools: Tools) -> None:
    """``--signal=USR2@40 --time=1``: the warning reaches the srun step's python (not the
    batch script's shell, which an untrapped USR2 would kill), which checkpoints and runs
    ``scontrol requeue $SLURM_JOB_ID`` (that command must outlive its own job's stop); the
    next run resumes from the checkpoint and finishes."""
    ex = executor(tools)
    ex.update_parameters(timeout_min=1, slurm_signal_delay_s=40)  # (warned 20 s in)
    job = ex.submit(Counter(), 100)  # 25 s of counting: more than one run's 20 s
    count, restarts = job.result()
    assert count == 100 and restarts is not None and int(restarts) >= 1
    assert _state(job, "COMPLETED") == "COMPLETED"
    said = job.stderr() or ""
    assert "Traceback" not in said and "CalledProcessError" not in said


def test_users_one_liners(tools: Tools) -> None:
    submitted = tools.sh("sbatch --parsable -t 5 --wrap 'sleep 30'")
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip()
    me = getpass.getuser()
    counted = tools.sh(f"squeue -u {me} -h -t PD,R | wc -l")
    assert int(counted.stdout) >= 1, counted.stderr
    changed = tools.sh(f"scontrol update JobId={job} TimeLimit=2:00:00")
    assert changed.returncode == 0 and not changed.stdout, changed.stderr
    shown = tools.sh(
        f"scontrol show job {job} | grep -o -e 'JobState=[A-Z]*' -e 'TimeLimit=[0-9:]*'"
    )
    said = shown.stdout.split()
    assert said[0] in ("JobState=PENDING", "JobState=RUNNING") and said[1] == "TimeLimit=02:00:00"
    assert tools.sh(f"scancel {job}").returncode == 0


TRAPPED = """#!/bin/bash
#SBATCH -t 2
trap 'echo shell got TERM >> {out}/said' TERM
srun bash -c 'trap "echo step got TERM >> {out}/said; exit 3" TERM
  touch {out}/ready; sleep 60 & wait' &
wait
echo first wait ended >> {out}/said
wait
echo shell done >> {out}/said
"""


def test_scancel_signal_reaches_the_step_not_the_batch_shell(tools: Tools) -> None:
    """As Slurm 22.05's: ``scancel --signal=TERM ID`` (no ``-b``/``-f``) signals the job's
    steps, not its batch shell: the srun step's trap runs, the shell's does not (an untrapped
    one would have died, and the job with it); the job goes on and completes. ``-v`` says
    Slurm's line on stderr, as qtoolkit reads it (``scancel: Terminating job ID`` for a
    cancel)."""
    out = tools.folder / "trapped"
    out.mkdir(mode=0o777)
    script = out / "trapped.sh"
    script.write_text(TRAPPED.format(out=out))
    submitted = tools.sh(f"sbatch --parsable {script}")
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip()
    deadline = time.monotonic() + TIMEOUT_S
    while not (out / "ready").exists():  # (the step's trap is set)
        assert time.monotonic() < deadline, "the srun step did not start"
        time.sleep(0.05)
    sent = tools.sh(f"scancel -v --signal=TERM {job}")
    assert (sent.returncode, sent.stdout) == (0, ""), sent.stderr
    assert sent.stderr == f"scancel: Signal 15 to job {job}\n"
    client = Client(tools.cluster.url)
    done = client.wait(job, timeout=TIMEOUT_S)
    said = (out / "said").read_text().splitlines()
    assert said == ["step got TERM", "first wait ended", "shell done"], said
    assert done["state"] == "Completed", done
    other = tools.sh("sbatch --parsable -t 2 --wrap 'sleep 60'")
    job = other.stdout.strip()
    cancelled = tools.sh(f"scancel -v {job}")
    assert (cancelled.returncode, cancelled.stdout) == (0, "")
    assert cancelled.stderr == f"scancel: Terminating job {job}\n"


def test_srun_output_files_per_task(tools: Tools) -> None:
    """``srun -o PATTERN -e PATTERN`` in a batch script: each task's own files (``%t``),
    written where it runs; a file they share (no ``%t``) holds every task's lines."""
    out = tools.folder / "steps"
    out.mkdir(mode=0o777)
    script = out / "steps.sh"
    script.write_text(
        "#!/bin/sh\n"
        f"srun -n 2 -o {out}/o-%j-%t.txt -e {out}/e-%t.txt sh -c "
        "'echo out $SLURM_PROCID; echo err $SLURM_PROCID >&2'\n"
        f"srun -n 2 --output={out}/both.txt sh -c 'echo line $SLURM_PROCID'\n"
    )
    ran = tools.sh(f"sbatch --parsable -n 2 -W {script}")
    assert ran.returncode == 0, ran.stderr
    job = ran.stdout.strip()
    assert (out / f"o-{job}-0.txt").read_text() == "out 0\n"
    assert (out / f"o-{job}-1.txt").read_text() == "out 1\n"
    assert (out / "e-1.txt").read_text() == "err 1\n"
    assert sorted((out / "both.txt").read_text().splitlines()) == ["line 0", "line 1"]


def test_srun_runs_steps_with_the_scripts_first_on_path(tools: Tools) -> None:
    """A batch script that puts the scripts' folder first on PATH (``source venv/bin/activate``
    where they were installed): its ``srun`` still runs steps of its own job, not a job."""
    out = tools.folder / "first-on-path"
    out.mkdir(mode=0o777)
    script = out / "steps.sh"
    script.write_text(
        "#!/bin/sh\n"
        f"PATH={tools.folder / 'bin'}:$PATH\n"
        "srun -n 2 sh -c 'echo $SLURM_JOB_ID.$SLURM_STEP_ID'\n"
    )
    ran = tools.sh(f"sbatch --parsable -n 2 -W -o {out}/out.txt {script}")
    assert ran.returncode == 0, ran.stderr
    job = ran.stdout.strip()
    assert (out / "out.txt").read_text().splitlines() == [f"{job}.0", f"{job}.0"]


def test_scontrol_against_the_controller(tools: Tools, capsys: pytest.CaptureFixture[str]) -> None:
    """scontrol's commands as scripts use them (in this process: each is a call or two)."""
    from fusesched.cli.scontrol import run
    from fusesched.sdk import Client

    client = Client(tools.cluster.url)

    def scontrol(*words: str) -> tuple[int, str, str]:
        code = run(words, tools.cluster.url, None, None)
        out, err = capsys.readouterr()
        return code, out, err

    one_cpu = {"resources": {"cpu": "1", "memory": "64Mi"}, "argv": ["true"]}
    held = client.submit({"name": "held", "hold": True, "walltime_s": 600, "groups": [one_cpu]})
    assert scontrol("show", "job", held)[1].split("\n")[3] == (
        "   JobState=PENDING Reason=JobHeldUser Dependency=(null)"
    )
    assert scontrol("update", f"jobid={held}", "TimeLimit=+10", "QOS=bronze") == (0, "", "")
    shown = scontrol("-o", "show", "job", held)[1]
    assert "TimeLimit=00:20:00" in shown and "QOS=bronze" in shown and shown.count("\n") == 1
    assert scontrol("release", held) == (0, "", "")
    assert client.wait(held, timeout=TIMEOUT_S)["state"] == "Completed"
    assert scontrol("show", "job", "987654") == (
        1,
        "",
        "slurm_load_jobs error: Invalid job id specified\n",
    )
    code, _, err = scontrol("hold", held, "987654")  # (each said; the exit status: 1)
    assert code == 1
    assert (
        err == f"scontrol: error: job {held} has ended\nInvalid job id specified for job 987654\n"
    )

    node = "node-a"
    drained = scontrol("update", f"NodeName={node}", "State=DRAIN", "Reason=disk swap")
    assert drained == (0, "", "")
    assert "+DRAIN\n" in scontrol("show", "node", node)[1]
    assert "   Reason=disk swap [" in scontrol("show", "node", node)[1]
    assert scontrol("update", f"NodeName={node}", "State=RESUME") == (0, "", "")
    assert "DRAIN" not in scontrol("show", "node", node)[1]
    assert "TotalNodes=2" in scontrol("show", "partition")[1]

    made = scontrol(
        "create",
        "reservation",
        "ReservationName=maint",
        "StartTime=now+1hour",
        "Duration=30",
        f"Nodes={node}",
        "Flags=MAINT",
    )
    assert made[:2] == (0, "Reservation created: maint\n"), made
    listed = scontrol("show", "reservation", "maint")[1]
    assert f"Nodes={node} NodeCnt=1 Flags=MAINT" in listed and "Duration=00:30:00" in listed
    assert scontrol("delete", "ReservationName=maint") == (0, "", "")
    assert scontrol("show", "reservation")[1] == "No reservations in the system\n"
