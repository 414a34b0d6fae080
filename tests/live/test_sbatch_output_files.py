"""A batch job's output files (``sbatch -o/-e``, ``--open-mode``) with real agents and real
processes: each start of the job empties its file (truncate, the default, as Slurm) or adds
to it (append), whether the job is submitted again or requeued; ``-e`` takes standard error
apart; the job's log keeps everything; a file that cannot be written does not stop the job."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

from tests.live.test_cli import PYTHON
from tests.live.test_cli_sbatch_options import run_in, submitted

from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client
from fusesched.submit.sbatch import parse_sbatch

# says which run it is on both streams; the first run of a requeued job waits to be requeued
SCRIPT = """\
#!/bin/sh
echo "out $SLURM_JOB_ID run $FUSESCHED_RESTART_COUNT"
echo "err $SLURM_JOB_ID run $FUSESCHED_RESTART_COUNT" >&2
if [ -n "$WAIT_FIRST" ] && [ "$FUSESCHED_RESTART_COUNT" = 0 ]; then exec sleep 60; fi
"""


def _until(check: Any, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def sbatch(cluster: LocalCluster, cwd: Path, *options: str) -> str:
    """``fusesched sbatch`` as a user types it (the Python command); waits for the end."""
    job_id = submitted(run_in(cwd, cluster, PYTHON, "sbatch", "--json", *options, "job.sh"))
    done = Client(cluster.url).wait(job_id, timeout=30)
    assert done["state"] == "Completed", done
    return job_id


def test_each_start_empties_the_file_unless_append(
    cluster: LocalCluster, scratch: Path, tmp_path: Path
) -> None:
    (tmp_path / "job.sh").write_text(SCRIPT)
    out = scratch / "out-demo.txt"
    pattern = f"--output={scratch}/out-%x.txt"
    first = sbatch(cluster, tmp_path, pattern, "-J", "demo")
    assert out.read_text() == f"out {first} run 0\nerr {first} run 0\n"
    second = sbatch(cluster, tmp_path, pattern, "-J", "demo")
    assert out.read_text() == f"out {second} run 0\nerr {second} run 0\n"  # emptied first
    third = sbatch(cluster, tmp_path, pattern, "-J", "demo", "--open-mode=append")
    assert out.read_text() == (
        f"out {second} run 0\nerr {second} run 0\nout {third} run 0\nerr {third} run 0\n"
    )
    # the log keeps the output as before
    log = Client(cluster.url).logs(third)
    assert f"out {third} run 0" in log and f"err {third} run 0" in log


def test_error_file_relative_paths_and_an_unwritable_file(
    cluster: LocalCluster, scratch: Path, tmp_path: Path
) -> None:
    (tmp_path / "job.sh").write_text(SCRIPT)
    job = sbatch(cluster, tmp_path, "-D", str(scratch), "-o", "o-%j.txt", "-e", "e-%j.txt")
    assert (scratch / f"o-{job}.txt").read_text() == f"out {job} run 0\n"
    assert (scratch / f"e-{job}.txt").read_text() == f"err {job} run 0\n"
    log = Client(cluster.url).logs(job)
    assert f"out {job} run 0" in log and f"err {job} run 0" in log
    # a folder that does not exist: the job runs, its log says why there is no file
    missing = scratch / "nowhere" / "out.txt"
    job = sbatch(cluster, tmp_path, "-o", str(missing))
    assert not missing.exists()
    log = Client(cluster.url).logs(job)
    assert f"out {job} run 0" in log and str(missing) in log, log
    if os.geteuid() == 0:  # tasks run as unprivileged users: the file is theirs to open
        closed = scratch / "roots"
        closed.mkdir(mode=0o755)  # root's: no other user may write here, and neither may the job
        job = sbatch(cluster, tmp_path, "-o", str(closed / "out.txt"))
        assert not (closed / "out.txt").exists()
        assert "Permission denied" in Client(cluster.url).logs(job)


def requeued_once(cluster: LocalCluster, out: Path, *options: str) -> str:
    """A job whose first run waits is requeued; its second run ends at once: its id."""
    args = ["-o", str(out), "--export=WAIT_FIRST=1", *options]
    request = parse_sbatch(SCRIPT, args=args).request.model_dump(mode="json")
    client = Client(cluster.url)
    job_id = client.submit(request)
    _until(lambda: out.exists() and "run 0" in out.read_text(), "the first run's output")
    assert client.requeue(job_id) == [job_id]
    done = client.wait(job_id, timeout=60)
    assert done["state"] == "Completed", done
    return job_id


def test_a_requeued_job_empties_its_file_or_adds_to_it(
    cluster: LocalCluster, scratch: Path
) -> None:
    truncated, appended = scratch / "t.txt", scratch / "a.txt"
    job = requeued_once(cluster, truncated)
    assert truncated.read_text() == f"out {job} run 1\nerr {job} run 1\n"
    job = requeued_once(cluster, appended, "--open-mode=append")
    # (the first run was stopped by the requeue: slurmstepd's line says so, as in Slurm)
    said = re.escape(f"fusesched: error: *** JOB {job} ON ") + r"\S+ CANCELLED AT \S+ "
    assert re.fullmatch(
        re.escape(f"out {job} run 0\nerr {job} run 0\n")
        + said
        + re.escape(f"DUE TO JOB REQUEUE ***\nout {job} run 1\nerr {job} run 1\n"),
        appended.read_text(),
    ), appended.read_text()


def test_the_job_runs_where_sbatch_ran_and_writes_slurm_out_there(
    cluster: LocalCluster, scratch: Path, tmp_path: Path
) -> None:
    (scratch / "job.sh").write_text('#!/bin/sh\necho "in $(pwd) from $SLURM_SUBMIT_DIR"\n')
    (scratch / "runs").mkdir(mode=0o777)
    (scratch / "runs").chmod(0o777)
    job = sbatch(cluster, scratch)  # as Slurm: in the folder sbatch ran in, slurm-<id>.out
    said = f"in {scratch} from {scratch}\n"
    assert (scratch / f"slurm-{job}.out").read_text() == said
    assert Client(cluster.url).logs(job) == said
    job = sbatch(cluster, scratch, "-D", "runs", "-o", "o-%j.txt")  # relative to it too
    assert (scratch / "runs" / f"o-{job}.txt").read_text() == f"in {scratch}/runs from {scratch}\n"
    # a folder the node does not have (or the job's user cannot enter): the task's folder
    gone = tmp_path / "gone"
    gone.mkdir()
    (gone / "job.sh").write_text((scratch / "job.sh").read_text())
    job = submitted(run_in(gone, cluster, PYTHON, "sbatch", "--json", "-H", "job.sh"))
    gone.rename(tmp_path / "moved")
    client = Client(cluster.url)
    assert client.release(job) == [job]
    done = client.wait(job, timeout=30)
    assert done["state"] == "Completed", done
    first, ran = client.logs(job).splitlines()
    assert first == (
        f"fusesched: the job runs in its task folder: {gone}, the folder it was submitted "
        f"from, is not a folder on this node; its output file {gone}/slurm-{job}.out is not "
        "written (its log has all of its output)"
    )
    assert ran.startswith("in /") and ran.endswith(f"/tasks/{job}.main.0 from {gone}"), ran
