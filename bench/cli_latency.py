"""How long the commands people call in loops take: ``squeue``, ``sacct``, ``scontrol show
job``, ``sinfo``, ``sbatch`` and ``sbatch --parsable``, each run as a fresh process.

One run measures this checkout's ``fusesched`` (the console script, with the native front
when ``make`` built it; and through ``python -c``, as the baseline runs) and, beside it, a
baseline: another checkout's ``src`` folder
(``--baseline-src``, e.g. a ``git worktree`` of an earlier commit, run through ``python -c``
with that folder first on ``sys.path``) and/or a real Slurm's commands (``--slurm``, when
``scripts/slurm_local.sh start`` has one up; needs root for its ``sbatch --uid``). Both
fusesched variants ask the same ``fusesched up`` cluster (one agent, SQLite), started here
with ``--jobs`` held jobs queued so that the listings are not empty (as many on Slurm with
``--slurm``; every job the benchmark submits there is cancelled at the end).

For each command: the median wall time of ``--repeat`` runs and the median CPU time (user +
system) of the process, as ``getrusage`` counts a child's. Results go to stdout as a table
and, with ``--json``, to a file.

    .venv/bin/python bench/cli_latency.py --repeat 15 --baseline-src /tmp/old/src [--slurm]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FUSESCHED = ROOT / ".venv" / "bin" / "fusesched"

#: (label, arguments after the command name) — the same for every system.
COMMANDS: list[tuple[str, list[str]]] = [
    ("squeue", ["squeue"]),
    ("squeue -u USER -h", ["squeue", "-u", "root", "-h"]),
    ("sacct -X", ["sacct", "-X"]),
    ("scontrol show job", ["scontrol", "show", "job", "JOB"]),
    ("sinfo", ["sinfo"]),
    ("sbatch --wrap", ["sbatch", "--wrap", "true"]),
    ("sbatch --parsable --wrap", ["sbatch", "--parsable", "--wrap", "true"]),
]


class Failed(Exception):
    """A measured command failed."""


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s) of one run of ``argv``; a failing command stops the benchmark."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise Failed(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def measure(
    prefix: list[str], env: dict[str, str], repeat: int, job: str, slurm: bool = False
) -> dict[str, dict[str, float]]:
    """Each of :data:`COMMANDS` run by ``prefix`` (a Slurm command's folder when ``slurm``),
    ``job`` an id to show."""
    out: dict[str, dict[str, float]] = {}
    for label, args in COMMANDS:
        args = [job if a == "JOB" else a for a in args]
        if slurm:
            name, *rest = args
            extra = ["--uid=nobody"] if name == "sbatch" and os.geteuid() == 0 else []
            argv = [f"{prefix[0]}/{name}", *extra, *rest]
        else:
            argv = [*prefix, *args]
        try:
            timed(argv, env)  # (a first run warms the page cache)
        except Failed as exc:
            if not slurm:
                raise SystemExit(str(exc)) from None
            print(f"  {label:<26} not measured: {exc}", file=sys.stderr)  # (sacct: no slurmdbd)
            continue
        runs = [timed(argv, env) for _ in range(repeat)]
        out[label] = {
            "wall_s": statistics.median(w for w, _ in runs),
            "cpu_s": statistics.median(c for _, c in runs),
        }
        print(f"  {label:<26} {out[label]['wall_s'] * 1000:7.0f} ms", file=sys.stderr)
    return out


def start_cluster(data: Path, port: int, jobs: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [str(FUSESCHED), "up", "--port", str(port), "--data-dir", str(data), "--agents", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            nodes = json.loads(urllib.request.urlopen(f"{url}/v1/nodes", timeout=1).read())
            if any(node.get("state") == "up" for node in nodes):
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    else:
        proc.kill()
        raise SystemExit("fusesched up did not come up")
    env = dict(os.environ, FUSESCHED_CONTROLLER=url)
    for _ in range(jobs):
        done = subprocess.run(
            [str(FUSESCHED), "sbatch", "--wrap", "sleep 600"],
            env=env,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            proc.kill()
            raise SystemExit(f"sbatch failed: {done.stderr.strip()}")
    return proc


def python_prefix(src: Path) -> list[str]:
    """The ``fusesched`` command of the checkout whose ``src`` folder this is."""
    code = (
        f"import sys; sys.path.insert(0, {str(src.resolve())!r}); "
        "sys.argv[0] = 'fusesched'; from fusesched.cli.entry import main; main()"
    )
    return [sys.executable, "-c", code]


def slurm_job(jobs: int) -> str:
    """Queue ``jobs`` held jobs on the running Slurm (as nobody when root); the first id."""
    extra = ["--uid=nobody"] if os.geteuid() == 0 else []
    ids = []
    for _ in range(max(jobs, 1)):
        done = subprocess.run(
            ["/usr/bin/sbatch", *extra, "--parsable", "-H", "--wrap", "sleep 600"],
            capture_output=True,
            text=True,
            check=True,
        )
        ids.append(done.stdout.strip().split(";")[0])
    return ids[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=15, help="runs per command (median)")
    parser.add_argument("--jobs", type=int, default=20, help="jobs queued before measuring")
    parser.add_argument("--port", type=int, default=18699)
    parser.add_argument("--baseline-src", type=Path, help="another checkout's src folder")
    parser.add_argument("--slurm", action="store_true", help="also a running real Slurm's")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    if args.repeat < 1 or args.jobs < 0:
        parser.error("--repeat must be at least 1 and --jobs at least 0")
    if args.baseline_src is not None and not (args.baseline_src / "fusesched").is_dir():
        parser.error(f"--baseline-src {args.baseline_src}: no fusesched package in it")
    if args.slurm and shutil.which("squeue", path="/usr/bin") is None:
        parser.error("--slurm: no /usr/bin/squeue (scripts/system_deps.sh installs Slurm)")

    data = Path(tempfile.mkdtemp(prefix="cli-latency-"))
    proc = start_cluster(data, args.port, args.jobs)
    env = dict(os.environ, FUSESCHED_CONTROLLER=f"http://127.0.0.1:{args.port}")
    env.pop("FUSESCHED_TOKEN", None)
    results: dict[str, object] = {"repeat": args.repeat, "jobs": args.jobs}
    try:
        print("this checkout (.venv/bin/fusesched):", file=sys.stderr)
        results["fusesched"] = measure([str(FUSESCHED)], env, args.repeat, "1")
        print("this checkout (python -c):", file=sys.stderr)
        results["python"] = measure(python_prefix(ROOT / "src"), env, args.repeat, "1")
        if args.baseline_src is not None:
            print(f"baseline ({args.baseline_src}, python -c):", file=sys.stderr)
            prefix = python_prefix(args.baseline_src)
            results["baseline"] = measure(prefix, env, args.repeat, "1")
        if args.slurm:
            print("Slurm (/usr/bin):", file=sys.stderr)
            job = slurm_job(args.jobs)
            try:
                results["slurm"] = measure(["/usr/bin"], dict(os.environ), args.repeat, job, True)
            finally:  # (its jobs: the held ones and those sbatch submitted)
                subprocess.run(["/usr/bin/scancel", "-u", "nobody"], capture_output=True)
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(data, ignore_errors=True)

    systems = [s for s in ("fusesched", "python", "baseline", "slurm") if s in results]
    print(f"{'command':<26}" + "".join(f"{s + ' wall/cpu ms':>26}" for s in systems))
    for label, _ in COMMANDS:
        cells = ""
        for system in systems:
            row = results[system].get(label)  # type: ignore[attr-defined]
            if row is None:
                cells += f"{'n/a':>16}   {'':<7}"
                continue
            cells += f"{row['wall_s'] * 1000:>16.0f} / {row['cpu_s'] * 1000:<7.0f}"
        print(f"{label:<26}{cells}")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
