"""The live platform against a real Slurm, side by side in one run, on the same trivial job.

The job: ``sh -c 'date +%s.%N > FILE'`` asking for 1 CPU and 100 MiB — it records the moment it
started, then exits. Every system gets the same job, the same machine and the same measurement:

* **submit jobs/s** — N submissions in a tight loop, timed until the last one is accepted:
  Slurm: ``sbatch`` (a C program) once per job from Python via ``subprocess``;
  fusesched: the SDK's ``Client.submit`` in a loop (REST API), the same with 4 client threads,
  ``fusesched submit job.yaml --json`` once per job — with the installed command (``make``'s
  native front, a C program like ``sbatch``, src/fusesched/cli/front.c) and with the Python
  command (a Python process per call) — one ``fusesched submit`` with N files, and
  ``Client.submit_many`` (one request for N jobs).
* **completed jobs/s** — N jobs, from the first submission until all N have finished
  (Slurm: the ``sbatch`` loop above; fusesched: one ``submit_many`` request, and also the
  one-by-one ``Client.submit`` loop for a like-for-like figure). Finished = every job has
  written its start file and the scheduler lists none pending or running. For fusesched, also
  the CPU time ``fusesched up`` used per job meanwhile (controller, agent and the jobs' shells).
* **submit-to-running latency** — M jobs one at a time on an idle system, each after a random
  pause (0–3 s, the same seeded pauses for every system, so that no submission is in step with
  a scheduler's periodic pass): from just before calling ``sbatch`` / ``Client.submit`` to the
  start time the job itself recorded; median, p90.

Slurm runs twice, started fresh each time by ``scripts/slurm_local.sh`` (slurmctld + slurmd on
this machine, the node = this machine's CPUs): with the default config of
/work/shared/ENVIRONMENT.md and tuned from Slurm's high-throughput guide (see the script and
docs/BENCHMARKS.md, section 4). fusesched runs as ``python -m fusesched up`` (controller with
SQLite + one local agent advertising this machine's CPUs) in a subprocess, once per
``--agent-links`` value: ``direct`` (``up``'s default: the local agent calls the controller in
the same process) and ``http`` (the agent goes through the REST API, as agents on other
machines do). Everything started here is stopped at the end, also on errors.

Run (as root, after scripts/system_deps.sh):
``.venv/bin/python bench/live_vs_slurm.py [--jobs 300] [--latency-samples 20] [--skip-slurm]
[--slurm-configs default,tuned] [--agent-links direct,http] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from fusesched.sdk import Client
from machine_info import ROOT, describe, machine

SLURM_SCRIPT = ROOT / "scripts" / "slurm_local.sh"
JOB_MEM_MB = 100
POLL_S = 0.02
#: Before each latency sample, a pause drawn uniformly from [0, LATENCY_PAUSE_S) (same seeded
#: draws for every system): submissions arrive at random moments, not in step with a
#: scheduler's periodic pass (Slurm schedules batch jobs from a once-a-second loop, every
#: batch_sched_delay = 3 s by default), which would make its latency look like a full period.
LATENCY_PAUSE_S = 3.0
LATENCY_SEED = 4
console = Console(width=max(Console().width, 132))


# ---------------------------------------------------------------------- shared helpers


def job_command(path: Path) -> str:
    """The trivial job: record its own start time (wall clock, as time.time()) and exit."""
    return f"date +%s.%N > {path}"


def read_stamp(path: Path) -> float | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    try:
        return float(text) if text else None
    except ValueError:
        return None


def stamp_dir(parent: Path, name: str) -> Path:
    """A folder every job may write its stamp into: fusesched's agent (as root) runs tasks under
    an unprivileged uid of the job's user, Slurm runs them as the submitting user (root)."""
    folder = parent / name
    folder.mkdir()
    folder.chmod(0o1777)
    return folder


def count_files(folder: Path) -> int:
    with os.scandir(folder) as it:
        return sum(1 for _ in it)


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(POLL_S)


def wait_stamp(path: Path, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while True:
        stamp = read_stamp(path)
        if stamp is not None:
            return stamp
        if time.monotonic() > deadline:
            raise TimeoutError(f"job that writes {path} did not start within {timeout:.0f} s")
        time.sleep(0.002)


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100), as numpy's default."""
    data = sorted(values)
    if len(data) == 1:
        return data[0]
    pos = (len(data) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def latency_pauses(samples: int) -> list[float]:
    rng = random.Random(LATENCY_SEED)
    return [rng.uniform(0, LATENCY_PAUSE_S) for _ in range(samples)]


def latency_summary(samples: list[float]) -> dict[str, Any]:
    return {
        "samples_s": [round(s, 4) for s in samples],
        "median_s": statistics.median(samples),
        "p90_s": percentile(samples, 90),
        "min_s": min(samples),
        "max_s": max(samples),
    }


def rate(n: int, seconds: float) -> dict[str, Any]:
    return {"jobs": n, "seconds": seconds, "jobs_per_s": n / seconds if seconds > 0 else None}


# ---------------------------------------------------------------------- Slurm


def slurm_ctl(*args: str) -> None:
    proc = subprocess.run(
        ["bash", str(SLURM_SCRIPT), *args], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"scripts/slurm_local.sh {' '.join(args)} failed ({proc.returncode}):\n"
            f"{proc.stderr.strip()}"
        )


def sbatch(path: Path, name: str) -> str:
    proc = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--quiet",
            "--job-name",
            name,
            "--ntasks=1",
            "--cpus-per-task=1",
            f"--mem={JOB_MEM_MB}M",
            "--output=/dev/null",
            f"--chdir={path.parent}",
            "--wrap",
            job_command(path),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"sbatch failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout.strip().split(";")[0]


def slurm_queue_empty() -> bool:
    proc = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True)
    return proc.returncode == 0 and not proc.stdout.strip()


def measure_slurm(mode: str, n: int, samples: int, work: Path) -> dict[str, Any]:
    """Start Slurm in ``mode``, measure, stop it (always)."""
    out: dict[str, Any] = {"system": f"Slurm {mode}", "mode": mode}
    console.print(f"[bold]Slurm {mode}[/]: starting slurmctld + slurmd …")
    slurm_ctl("start", mode)
    try:
        out["config"] = Path("/etc/slurm/slurm.conf").read_text()
        out["loadavg_at_start"] = os.getloadavg()[0]
        timeout = max(600.0, n * 5.0)
        warm = stamp_dir(work, f"slurm-{mode}-warm")
        for i in range(2):
            sbatch(warm / f"w{i}", "warm")
        wait_until(lambda: count_files(warm) == 2 and slurm_queue_empty(), 120, "warm-up jobs")

        # submission rate, then completed-jobs throughput of the same N jobs
        folder = stamp_dir(work, f"slurm-{mode}-burst")
        t0 = time.monotonic()
        for i in range(n):
            sbatch(folder / f"f{i}", f"b{i}")
        t_sub = time.monotonic() - t0
        console.print(f"  sbatch ×{n}: {t_sub:.2f} s ({n / t_sub:.0f}/s); waiting for the jobs …")
        wait_until(lambda: count_files(folder) == n, timeout, f"{n} Slurm jobs to start")
        wait_until(slurm_queue_empty, timeout, "Slurm's queue to empty")
        t_done = time.monotonic() - t0
        out["submit_cli"] = rate(n, t_sub)
        out["completed"] = rate(n, t_done)
        console.print(f"  {n} jobs finished in {t_done:.1f} s ({n / t_done:.2f}/s)")

        # latency, one job at a time on an idle Slurm
        lat_dir = stamp_dir(work, f"slurm-{mode}-latency")
        lats = []
        for i, pause in enumerate(latency_pauses(samples)):
            time.sleep(pause)
            path = lat_dir / f"l{i}"
            t_call = time.time()
            sbatch(path, f"l{i}")
            lats.append(wait_stamp(path, 120) - t_call)
            wait_until(slurm_queue_empty, 120, "the latency job to finish")
        out["latency"] = latency_summary(lats)
        console.print(
            f"  latency: median {out['latency']['median_s']:.3f} s, "
            f"p90 {out['latency']['p90_s']:.3f} s"
        )
    finally:
        slurm_ctl("stop")
    return out


# ---------------------------------------------------------------------- fusesched


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Fusesched:
    """``python -m fusesched up`` in a subprocess: a controller and one local agent."""

    def __init__(self, data_dir: Path, link: str = "direct") -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = (data_dir.parent / "fusesched-up.log").open("w")
        cmd = [sys.executable, "-m", "fusesched", "up", "--data-dir", str(data_dir)]
        cmd += ["--agent-link", link]
        self.proc = subprocess.Popen(
            [*cmd, "--port", str(self.port)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
            # a shell's background job starts with SIGINT ignored; `up` stops cleanly on it
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        self.client = Client(self.url)

    def wait_ready(self, timeout: float = 60) -> None:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"fusesched up exited ({self.proc.returncode}); see log")
            try:
                with urllib.request.urlopen(self.url + "/v1/nodes", timeout=2) as resp:
                    nodes = json.loads(resp.read())
            except OSError:
                return False
            return any(n["state"] == "up" for n in nodes)

        wait_until(ready, timeout, "fusesched to be up with its agent")

    def idle(self) -> bool:
        return all(q["pending"] == 0 and q["running"] == 0 for q in self.client.queues())

    def raise_failures(self) -> None:
        bad = self.client.jobs(states=["Failed", "Cancelled"], limit=3)
        if bad:
            raise RuntimeError(f"fusesched jobs did not complete, e.g. {bad[0]}")

    def cpu_s(self, own: bool = False) -> float:
        """CPU seconds `fusesched up` has used so far (controller, agent and the tasks it has
        reaped: the jobs' own shells count too); ``own``: its own threads only."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return sum(int(x) for x in fields[11 : 13 if own else 15]) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # `up` stops its agent and controller
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.log.close()


FRONT = ROOT / ".venv" / "bin" / "fusesched"


def native_front() -> Path | None:
    """``make``'s native front of the ``fusesched`` command, if that is what is installed."""
    try:
        with FRONT.open("rb") as handle:
            return FRONT if handle.read(4) == b"\x7fELF" else None
    except OSError:
        return None


def fs_request(path: Path, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "groups": [
            {
                "resources": {"cpu": 1, "memory": f"{JOB_MEM_MB}Mi"},
                "argv": ["sh", "-c", job_command(path)],
            }
        ],
    }


def fs_yaml(path: Path, name: str) -> str:
    return (
        f"name: {name}\n"
        f"resources: {{cpu: 1, memory: {JOB_MEM_MB}Mi}}\n"
        f"command: [sh, -c, {json.dumps(job_command(path))}]\n"
    )


def fs_yaml_files(work: Path, name: str, n: int, prefix: str) -> tuple[Path, list[Path]]:
    """(the stamp folder, ``n`` job files writing into it) under ``work``."""
    folder = stamp_dir(work, name)
    yaml_dir = work / f"{name}-yaml"
    yaml_dir.mkdir()
    files = []
    for i in range(n):
        f = yaml_dir / f"job{i}.yaml"
        f.write_text(fs_yaml(folder / f"f{i}", f"{prefix}{i}"))
        files.append(f)
    return folder, files


def measure_fusesched(n: int, samples: int, work: Path, link: str = "direct") -> dict[str, Any]:
    """Every fusesched figure against one ``fusesched up --agent-link LINK``."""
    system = "fusesched" if link == "direct" else f"fusesched, agent link {link}"
    out: dict[str, Any] = {
        "system": system,
        "mode": f"up (SQLite, 1 local agent, --agent-link {link})",
        "agent_link": link,
    }
    console.print(f"[bold]{system}[/]: starting `python -m fusesched up --agent-link {link}` …")
    work = work / f"fs-{link}"
    work.mkdir()
    work.chmod(0o755)  # the tasks' uid writes stamps below
    fs = Fusesched(work / "fusesched-data", link)
    try:
        fs.wait_ready()
        client = fs.client
        node = client.nodes()[0]
        out["node"] = {"cpu": node["capacity"].get("cpu"), "memory": node["capacity"]["memory"]}
        out["loadavg_at_start"] = os.getloadavg()[0]
        timeout = max(600.0, n * 5.0)

        def drain(folder: Path, count: int) -> None:
            last_check = [time.monotonic()]

            def started() -> bool:
                if count_files(folder) >= count:
                    return True
                if time.monotonic() - last_check[0] > 1.0:  # a failed job never writes its file
                    last_check[0] = time.monotonic()
                    if fs.idle() and count_files(folder) < count:
                        fs.raise_failures()
                return False

            wait_until(started, timeout, f"{count} jobs to start")
            wait_until(fs.idle, timeout, "fusesched's queues to empty")

        warm = stamp_dir(work, "fs-warm")
        for i in range(2):
            client.submit(fs_request(warm / f"w{i}", "warm"))
        drain(warm, 2)

        # 1. REST API, one request per job (also a like-for-like completed-jobs figure)
        folder = stamp_dir(work, "fs-api")
        reqs = [fs_request(folder / f"f{i}", f"a{i}") for i in range(n)]
        t0 = time.monotonic()
        for req in reqs:
            client.submit(req)
        t_sub = time.monotonic() - t0
        drain(folder, n)
        t_done = time.monotonic() - t0
        out["submit_api"] = rate(n, t_sub)
        out["completed_one_by_one"] = rate(n, t_done)
        console.print(
            f"  Client.submit ×{n}: {n / t_sub:.0f}/s; all finished after {t_done:.1f} s "
            f"({n / t_done:.1f}/s)"
        )

        # 2. REST API, 4 client threads
        folder = stamp_dir(work, "fs-api4")
        reqs = [fs_request(folder / f"f{i}", f"t{i}") for i in range(n)]
        threads = 4

        def submit_share(k: int) -> None:
            own = Client(fs.url)
            for req in reqs[k::threads]:
                own.submit(req)

        with ThreadPoolExecutor(threads) as pool:
            t0 = time.monotonic()
            list(pool.map(submit_share, range(threads)))
            t_sub = time.monotonic() - t0
        drain(folder, n)
        out["submit_api_4_threads"] = rate(n, t_sub)
        console.print(f"  Client.submit ×{n}, 4 threads: {n / t_sub:.0f}/s")

        # 3. CLI, one `fusesched submit job.yaml --json` process per job: the installed command
        # (make's native front, src/fusesched/cli/front.c) and the Python command
        env = dict(os.environ, FUSESCHED_CONTROLLER=fs.url)
        cli = [sys.executable, "-m", "fusesched", "submit"]
        commands = [("submit_cli_python", cli, "Python command")]
        front = native_front()
        if front is not None:
            commands.insert(0, ("submit_cli", [str(front), "submit"], "native front"))
        else:
            console.print(f"  [yellow]{FRONT} is not the native front (no C compiler?)[/]")
        for key, command, label in commands:
            folder, files = fs_yaml_files(work, f"fs-{key}", n, "c")
            cpu0 = fs.cpu_s(own=True)
            t0 = time.monotonic()
            for f in files:
                proc = subprocess.run(
                    [*command, str(f), "--json"],
                    capture_output=True,
                    text=True,
                    env=env,
                    check=False,
                )
                if proc.returncode != 0:
                    raise RuntimeError(f"fusesched submit failed: {proc.stderr.strip()}")
            t_sub = time.monotonic() - t0
            drain(folder, n)
            # the controller's and agent's own CPU per job, from the first call until all ran
            own_ms = 1000 * (fs.cpu_s(own=True) - cpu0) / n
            out[key] = rate(n, t_sub) | {"up_own_cpu_ms_per_job": own_ms}
            console.print(
                f"  fusesched submit, {label}, one process per job ×{n}: {n / t_sub:.1f}/s "
                f"({own_ms:.1f} ms of `fusesched up`'s own CPU per job)"
            )

        # 4. CLI, one call with N files
        folder, files = fs_yaml_files(work, "fs-cli-n", n, "m")
        t0 = time.monotonic()
        proc = subprocess.run(
            [*cli, *map(str, files), "--json"], capture_output=True, text=True, env=env, check=False
        )
        t_sub = time.monotonic() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"fusesched submit (N files) failed: {proc.stderr.strip()}")
        if len(json.loads(proc.stdout)["ids"]) != n:
            raise RuntimeError("fusesched submit (N files) did not return N ids")
        drain(folder, n)
        out["submit_cli_n_files"] = rate(n, t_sub)
        console.print(f"  fusesched submit with {n} files (one process): {n / t_sub:.0f}/s")

        # 5. batch API: submission rate and completed-jobs throughput
        folder = stamp_dir(work, "fs-batch")
        reqs = [fs_request(folder / f"f{i}", f"s{i}") for i in range(n)]
        cpu0 = fs.cpu_s()
        t0 = time.monotonic()
        ids = client.submit_many(reqs)
        t_sub = time.monotonic() - t0
        drain(folder, n)
        t_done = time.monotonic() - t0
        cpu_ms = (fs.cpu_s() - cpu0) * 1000 / n
        if len(ids) != n:
            raise RuntimeError("submit_many did not return N ids")
        out["submit_many"] = rate(n, t_sub)
        out["completed"] = rate(n, t_done)
        out["completed"]["cpu_ms_per_job"] = cpu_ms  # controller + agent + the jobs' shells
        console.print(
            f"  submit_many({n}): {n / t_sub:.0f}/s; all finished after {t_done:.1f} s "
            f"({n / t_done:.1f}/s; {cpu_ms:.1f} ms of CPU per job in `fusesched up`)"
        )

        # 6. latency, one job at a time on an idle controller
        lat_dir = stamp_dir(work, "fs-latency")
        lats = []
        for i, pause in enumerate(latency_pauses(samples)):
            time.sleep(pause)
            path = lat_dir / f"l{i}"
            t_call = time.time()
            job_id = client.submit(fs_request(path, f"l{i}"))
            try:
                lats.append(wait_stamp(path, 30) - t_call)
            except TimeoutError:
                fs.raise_failures()
                raise
            client.wait(job_id, timeout=120, poll_s=POLL_S)
        out["latency"] = latency_summary(lats)
        console.print(
            f"  latency: median {out['latency']['median_s']:.3f} s, "
            f"p90 {out['latency']['p90_s']:.3f} s"
        )

        bad = client.jobs(states=["Failed", "Cancelled"], limit=1000)
        out["failed_jobs"] = len(bad)
        if bad:
            console.print(f"  [red]{len(bad)} jobs did not complete[/], e.g. {bad[0]}")
    finally:
        fs.stop()
    return out


# ---------------------------------------------------------------------- report


def _fmt(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _get(result: dict[str, Any], key: str) -> float | None:
    item = result.get(key)
    return None if item is None else item.get("jobs_per_s")


def ratios(fs: dict[str, Any], slurm: dict[str, Any]) -> dict[str, float | None]:
    def div(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None or b == 0 else a / b

    sb = _get(slurm, "submit_cli")
    return {
        "submit_api_vs_sbatch": div(_get(fs, "submit_api"), sb),
        "submit_cli_vs_sbatch": div(_get(fs, "submit_cli"), sb),
        "submit_cli_python_vs_sbatch": div(_get(fs, "submit_cli_python"), sb),
        "completed": div(_get(fs, "completed"), _get(slurm, "completed")),
        "completed_one_by_one": div(_get(fs, "completed_one_by_one"), _get(slurm, "completed")),
        # latency: how many times shorter fusesched's is (above 1: fusesched is faster)
        "latency_median": div(slurm["latency"]["median_s"], fs["latency"]["median_s"]),
        "latency_p90": div(slurm["latency"]["p90_s"], fs["latency"]["p90_s"]),
    }


def table(results: list[dict[str, Any]], n: int, samples: int) -> Table:
    t = Table(
        title=f"{n} trivial jobs (1 CPU, {JOB_MEM_MB} MB) per throughput figure; "
        f"latency over {samples} jobs, one at a time",
        title_justify="left",
        caption="submit/s API: fusesched's REST API through the SDK (Slurm: no slurmrestd here); "
        "submit/s CLI: one process per job (sbatch and fusesched's native front are C)",
        caption_justify="left",
    )
    t.add_column("system / config")
    t.add_column("submit/s API", justify="right")
    t.add_column("submit/s CLI", justify="right")
    t.add_column("completed jobs/s", justify="right")
    t.add_column("latency median", justify="right")
    t.add_column("latency p90", justify="right")

    def ms(r: dict[str, Any], key: str) -> str:
        lat = r.get("latency")
        return "—" if lat is None else f"{lat[key] * 1000:,.0f} ms"

    for r in results:
        if not r["system"].startswith("fusesched"):
            t.add_row(
                f"{r['system']} (sbatch)",
                "—",
                _fmt(_get(r, "submit_cli"), 1),
                _fmt(_get(r, "completed"), 2),
                ms(r, "median_s"),
                ms(r, "p90_s"),
            )
            continue
        t.add_row(
            f"{r['system']} (Client.submit; native CLI; submit_many for completed)",
            _fmt(_get(r, "submit_api"), 0),
            _fmt(_get(r, "submit_cli"), 1),
            _fmt(_get(r, "completed"), 2),
            ms(r, "median_s"),
            ms(r, "p90_s"),
        )
        t.add_row(
            "  fusesched, 4 client threads; CLI: the Python command",
            _fmt(_get(r, "submit_api_4_threads"), 0),
            _fmt(_get(r, "submit_cli_python"), 1),
        )
        t.add_row(
            "  fusesched, submit_many / one CLI call with N files",
            _fmt(_get(r, "submit_many"), 0),
            _fmt(_get(r, "submit_cli_n_files"), 0),
        )
        t.add_row(
            "  fusesched, completed when submitted one by one",
            "",
            "",
            _fmt(_get(r, "completed_one_by_one"), 2),
        )
    return t


def ratio_table(rats: dict[str, dict[str, float | None]]) -> Table:
    t = Table(
        title="fusesched ÷ Slurm tuned, same run (above 1: fusesched ahead)", title_justify="left"
    )
    t.add_column("fusesched")
    for col in (
        "submit: API vs sbatch",
        "submit: CLI vs sbatch",
        "completed jobs/s",
        "completed (one-by-one)",
        "latency median",
        "latency p90",
    ):
        t.add_column(col, justify="right")
    for system, rat in rats.items():
        t.add_row(
            system,
            *(
                "—" if rat[k] is None else f"{rat[k]:.2f}×"
                for k in (
                    "submit_api_vs_sbatch",
                    "submit_cli_vs_sbatch",
                    "completed",
                    "completed_one_by_one",
                    "latency_median",
                    "latency_p90",
                )
            ),
        )
    return t


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=300, help="jobs per throughput phase (300)")
    parser.add_argument(
        "--latency-samples", type=int, default=20, help="jobs for the latency figures (20)"
    )
    parser.add_argument("--skip-slurm", action="store_true", help="measure fusesched only")
    parser.add_argument(
        "--slurm-configs",
        default="default,tuned",
        help="Slurm configurations to run, in order (default,tuned); the ratios need tuned",
    )
    parser.add_argument(
        "--agent-links",
        default="direct,http",
        help="`fusesched up --agent-link` values to measure, one fusesched run each "
        "(direct,http): direct is up's default, http is how agents on other machines talk",
    )
    parser.add_argument("--json", type=Path, help="also write the results here as JSON")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.latency_samples < 1:
        parser.error("--jobs and --latency-samples must be at least 1")
    configs = [x for x in args.slurm_configs.split(",") if x]
    if not configs or any(x not in ("default", "tuned") for x in configs):
        parser.error("--slurm-configs: default and/or tuned, comma-separated")
    links = [x for x in args.agent_links.split(",") if x]
    if not links or any(x not in ("direct", "http") for x in links) or len(set(links)) < len(links):
        parser.error("--agent-links: direct and/or http, comma-separated, each once")

    info = machine()
    info["nproc"] = len(os.sched_getaffinity(0))
    console.print(describe(info) + f", nproc {info['nproc']}")
    if not args.skip_slurm:
        if os.geteuid() != 0:
            parser.error("Slurm is started as root: run as root, or pass --skip-slurm")
        if shutil.which("sbatch") is None:
            parser.error("sbatch not found: run scripts/system_deps.sh, or pass --skip-slurm")

    work = Path(tempfile.mkdtemp(prefix="live_vs_slurm-"))
    work.chmod(0o755)  # fusesched's tasks run under an unprivileged uid

    def terminate(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")  # run the finally blocks: stop everything

    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGINT, terminate)
    results: list[dict[str, Any]] = []
    started = time.time()
    try:
        if not args.skip_slurm:
            for mode in configs:
                results.append(measure_slurm(mode, args.jobs, args.latency_samples, work))
        for link in links:
            results.append(measure_fusesched(args.jobs, args.latency_samples, work, link))
    finally:
        if not args.skip_slurm:
            try:
                slurm_ctl("stop")
            except RuntimeError as exc:
                console.print(f"[red]{exc}[/]")
        shutil.rmtree(work, ignore_errors=True)

    console.print(table(results, args.jobs, args.latency_samples))
    by_system = {r["system"]: r for r in results}
    rats: dict[str, dict[str, float | None]] = {}
    if "Slurm tuned" in by_system:
        for r in results:
            if r["system"].startswith("fusesched"):
                rats[r["system"]] = ratios(r, by_system["Slurm tuned"])
        console.print(ratio_table(rats))
    console.print(f"wall time of the run: {time.time() - started:.0f} s")
    if args.json:
        report = {
            "benchmark": "live_vs_slurm",
            "jobs": args.jobs,
            "latency_samples": args.latency_samples,
            "machine": info,
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            "results": results,
            # per fusesched run (by system name); "fusesched" is `up`'s default link
            "ratios_vs_slurm_tuned": rats.get("fusesched"),
            "ratios_by_system": rats,
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        console.print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
