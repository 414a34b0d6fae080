"""Chaos: controllers and agents SIGKILLed under a stream of submissions; nothing is lost.

A controller (SQLite, or PostgreSQL) or, with ``--standby``, two controllers electing a leader
on PostgreSQL, and ``--agents`` node agents, every one a real process (``fusesched controller``
/ ``fusesched agent``). A submitter thread submits short jobs without pause (1-task jobs and
2-task gangs, 0.5-4 s each, some with their own restart policy) while a chaos thread, at seeded
random intervals, SIGKILLs the controller (the leader, with ``--standby``) and starts it again
0-2 s later, or SIGKILLs an agent and starts it again 0-3 s later with the same config and work
dir. Then the chaos stops, everything is left to finish, and every job is accounted for.

Every task appends ``<job name> <restart> <rank> <pid> start|end <epoch>`` to a shared ledger
(single ``O_APPEND`` writes), refreshes a file of its own every 0.2 s (its mtime is the last
moment the run is known to have been alive, when it was killed before its ``end`` line), and
holds a ``flock`` per job and rank while it runs: a second run of the same job and rank that
starts while the first still lives finds the lock taken and writes ``overlap``. Two runs of a
job overlap when one starts before the other's last sign of life — a conservative test: the
real end of a killed run is later, never earlier.

    .venv/bin/python bench/chaos.py --duration 120 --seed 1 --json chaos-sqlite.json
    .venv/bin/python bench/chaos.py --duration 120 --seed 2 --standby \\
        --db postgresql+psycopg://postgres@127.0.0.1:5432/fusesched_chaos --json chaos-pg.json

The PostgreSQL database must exist and be empty (``createdb -h 127.0.0.1 -U postgres NAME``).
Run as root, tasks run under unprivileged uids (docs/LIVE.md), so every folder they use is
world-searchable (below a ``mkdtemp`` folder of mode 0755, shared folders 1777).
"""

from __future__ import annotations

import argparse
import contextlib
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
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fusesched.sdk import FINISHED, Client, ControllerError

ROOT = Path(__file__).resolve().parents[1]
FUSESCHED = str(Path(sys.executable).with_name("fusesched"))
STEP_S = 0.2  # how often a task refreshes its alive file


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def healthy(url: str, timeout: float = 1.0) -> bool:
    """``url`` answers ``/healthz`` with 200 (a leader, not a standby)."""
    try:
        Client(url, timeout=timeout).health()
        return True
    except (ControllerError, OSError):
        return False


# ---------------------------------------------------------------------------- processes


@dataclass
class Proc:
    """One server process (a controller or an agent), started again and again."""

    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None
    starts: int = 0

    def start(self) -> None:
        with self.log.open("ab") as out:
            out.write(f"\n==== start {self.starts} at {time.time():.3f}\n".encode())
            out.flush()
            self.popen = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        self.starts += 1

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self) -> None:
        if self.popen is not None:
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait()


def stop_all(procs: list[Proc], timeout: float = 20.0) -> None:
    """Stop ``procs`` cleanly (an agent kills its tasks), all at once: SIGTERM to each, then
    wait for them together (one by one, each stop would wait out its own long poll); SIGKILL
    those still there after ``timeout`` seconds."""
    running = [p for p in procs if p.popen is not None and p.popen.poll() is None]
    for proc in running:
        assert proc.popen is not None
        proc.popen.terminate()
    deadline = time.monotonic() + timeout
    for proc in running:
        assert proc.popen is not None
        try:
            proc.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()


class Cluster:
    """The controllers and agents of one chaos run, as processes."""

    def __init__(self, root: Path, agents: int, cpu: int, db: str | None, standby: bool) -> None:
        self.root = root
        self.standby = standby
        (root / "logs").mkdir()
        self.controllers: list[Proc] = []
        self.urls: list[str] = []
        for i in range(2 if standby else 1):
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            argv = [FUSESCHED, "controller", "--data-dir", str(root / f"controller-{i}")]
            argv += ["--port", str(port), "--no-auth"]
            if db:
                argv += ["--db", db]
            if standby:
                argv.append("--standby")
            self.controllers.append(Proc(f"controller-{i}", argv, root / "logs" / f"c{i}.log"))
            self.urls.append(url)
        self.url = ",".join(self.urls)
        self.agents: list[Proc] = []
        for i in range(agents):
            name = f"chaos-{i}"
            config = root / f"{name}.yaml"
            config.write_text(
                json.dumps(  # JSON is YAML
                    {
                        "name": name,
                        "address": "127.0.0.1",
                        "cpu": cpu,
                        "memory": "2Gi",
                        "work_dir": str(root / "agents" / name),
                        "image_cache_dir": str(root / "images"),
                        "nvml": False,
                        "sample_interval_s": 5,
                    }
                )
            )
            argv = [FUSESCHED, "agent", "--controller", self.url, "--config", str(config)]
            self.agents.append(Proc(name, argv, root / "logs" / f"{name}.log"))

    def leader(self) -> int | None:
        for i, url in enumerate(self.urls):
            if self.controllers[i].alive() and healthy(url):
                return i
        return None

    def wait_leader(self, timeout: float = 60.0, poll_s: float = 0.02) -> int:
        deadline = time.monotonic() + timeout
        while True:
            lead = self.leader()
            if lead is not None:
                return lead
            if time.monotonic() > deadline:
                raise RuntimeError(f"no controller answers /healthz after {timeout} s")
            time.sleep(poll_s)

    def start(self) -> None:
        first, *others = self.controllers
        first.start()
        for agent in self.agents:  # they start meanwhile: they retry until a controller answers
            agent.start()
        self.wait_leader()  # the first one leads
        for proc in others:
            proc.start()

    def stop(self) -> None:
        stop_all(self.agents + self.controllers)


# ---------------------------------------------------------------------------- jobs


def task_script(shared: Path, name: str, seconds: float) -> str:
    """The command of every task of job ``name``: ledger lines, an alive file, a lock."""
    steps = max(1, round(seconds / STEP_S))
    line = f'"{name} $R $K $$'
    return (
        f'D={shared}; R="${{FUSESCHED_RESTART_COUNT:-0}}"; K="${{RANK:-0}}"\n'
        f'exec 9>>"$D/locks/{name}.$K"\n'
        f'if ! flock -n 9; then echo {line} overlap $(date +%s.%N)" >> "$D/ledger"; fi\n'
        f'echo {line} start $(date +%s.%N)" >> "$D/ledger"\n'
        f'A="$D/alive/{name}.$R.$K.$$"; i=0\n'
        f'while [ $i -lt {steps} ]; do sleep {STEP_S}; : > "$A"; i=$((i+1)); done\n'
        f'echo {line} end $(date +%s.%N)" >> "$D/ledger"\n'
    )


def make_job(
    rng: random.Random,
    shared: Path,
    name: str,
    plain_share: float,
    long_share: float = 0.0,
    long_s: tuple[float, float] = (6.0, 12.0),
) -> dict[str, Any]:
    """A job of 0.5-4 s (``long_share`` of them ``long_s``, 6-12 s by default, so that agent
    kills catch runs in the middle: a shorter orphan mostly ends before its restarted agent is
    up to kill it)."""
    seconds = round(rng.uniform(*long_s) if rng.random() < long_share else rng.uniform(0.5, 4.0), 1)
    replicas = 2 if rng.random() < 0.35 else 1
    group = {
        "argv": ["sh", "-c", task_script(shared, name, seconds)],
        "resources": {"cpu": "1", "memory": "32Mi"},
        "replicas": replicas,
    }
    job: dict[str, Any] = {"name": name, "walltime_s": 600, "groups": [group]}
    if rng.random() >= plain_share:  # else the default policy: 3 restarts, 30 s backoff doubling
        job["restart"] = {"max_restarts": 5, "backoff_s": 1}
    return job


@dataclass
class Submission:
    name: str
    tasks: int
    policy: str  # "own" (5 restarts, 1 s) or "default"
    outcome: str = ""  # accepted, uncertain, refused
    job_id: str | None = None
    attempts: int = 0
    error: str = ""


def certainly_not_carried_out(exc: ControllerError) -> bool:
    """The request never reached a leader: refused connection (fresh connection, see
    :func:`submit_once`), every controller unreachable or standing by, or a 503."""
    text = str(exc)
    return exc.status == 503 or (
        exc.status == 0 and ("Connection refused" in text or text.startswith("no controller leads"))
    )


def submit_once(url: str, request: dict[str, Any]) -> str:
    """Submit on a fresh client, so on a fresh connection. On a kept-alive connection that
    breaks before the answer, the SDK sends the request once more on a new connection, also a
    POST that the dying controller may already have committed (a duplicate if a new controller
    answers, a misleading "Connection refused" if none does); on a fresh one it does not."""
    return Client(url, timeout=10.0).submit(request)


class Submitter(threading.Thread):
    def __init__(self, url: str, shared: Path, opts: Options) -> None:
        super().__init__(name="submitter", daemon=True)
        self.url = url
        self.shared = shared
        self.rng = random.Random(f"{opts.seed}-submit")
        self.seed = opts.seed
        self.gap = opts.submit_gap
        self.plain_share = opts.plain_share
        self.long_share = opts.long_share
        self.long_s = opts.long_s
        self.stop_event = threading.Event()
        self.submissions: list[Submission] = []

    def run(self) -> None:
        n = 0
        while not self.stop_event.is_set():
            name = f"chaos{self.seed}-{n:05d}"
            n += 1
            request = make_job(
                self.rng, self.shared, name, self.plain_share, self.long_share, self.long_s
            )
            sub = Submission(
                name, request["groups"][0]["replicas"], "own" if "restart" in request else "default"
            )
            self.submissions.append(sub)
            deadline = time.monotonic() + 60
            while True:
                sub.attempts += 1
                try:
                    sub.job_id = submit_once(self.url, request)
                    sub.outcome = "accepted"
                    break
                except ControllerError as exc:
                    sub.error = str(exc)[:200]
                    if not certainly_not_carried_out(exc):
                        sub.outcome = "uncertain" if exc.status == 0 else "refused"
                        break
                except OSError as exc:
                    sub.error, sub.outcome = str(exc)[:200], "uncertain"
                    break
                if time.monotonic() > deadline:
                    sub.outcome = "refused"
                    break
                time.sleep(0.2)
            self.stop_event.wait(self.rng.uniform(*self.gap))


# ---------------------------------------------------------------------------- chaos


@dataclass
class ChaosLog:
    controller_kills: int = 0
    agent_kills: int = 0
    # SIGKILL of the leader -> some controller answers /healthz 200 (restart included)
    recovery_s: list[float] = field(default_factory=list)
    takeover_s: list[float] = field(default_factory=list)  # --standby: by the standby
    agent_exits: int = 0  # agents that ended without being killed (restarted too)
    events: list[str] = field(default_factory=list)


class Chaos(threading.Thread):
    def __init__(
        self,
        cluster: Cluster,
        seed: int,
        gap: tuple[float, float],
        controller_share: float,
        t0: float,
    ) -> None:
        super().__init__(name="chaos", daemon=True)
        self.cluster = cluster
        self.rng = random.Random(f"{seed}-chaos")
        self.gap = gap
        self.controller_share = controller_share
        self.stop_event = threading.Event()
        self.log = ChaosLog()
        self.t0 = t0
        self.error: BaseException | None = None

    def note(self, text: str) -> None:
        self.log.events.append(f"{time.monotonic() - self.t0:7.2f} {text}")

    def run(self) -> None:
        try:
            while not self.stop_event.wait(self.rng.uniform(*self.gap)):
                self.revive_exited_agents()
                if self.rng.random() < self.controller_share:
                    self.kill_controller()
                else:
                    self.kill_agent()
        except BaseException as exc:
            self.error = exc
            self.note(f"chaos thread failed: {exc!r}")

    def revive_exited_agents(self) -> None:
        for agent in self.cluster.agents:
            if not agent.alive():
                self.log.agent_exits += 1
                self.note(f"{agent.name} had exited ({agent.popen and agent.popen.returncode})")
                agent.start()

    def kill_controller(self) -> None:
        cluster = self.cluster
        lead = cluster.wait_leader()
        victim = cluster.controllers[lead]
        delay = self.rng.uniform(0.0, 2.0)
        killed = time.monotonic()
        victim.kill()
        others = [u for i, u in enumerate(cluster.urls) if i != lead]
        if not others:  # one controller: it is started again, then answers
            self.stop_event.wait(delay)
            victim.start()
            cluster.wait_leader(timeout=90)
            recovered = time.monotonic() - killed
        else:  # the standby takes over; the killed one is started again as a standby
            restarted = False
            deadline = killed + 90
            while True:
                now = time.monotonic()
                if not restarted and now >= killed + delay:
                    victim.start()
                    restarted = True
                if cluster.leader() is not None:  # the standby (or the restarted one)
                    recovered = time.monotonic() - killed
                    break
                if now > deadline:
                    raise RuntimeError("the standby did not take over within 90 s")
                time.sleep(0.02)
            self.log.takeover_s.append(recovered)
            if not restarted:
                self.stop_event.wait(max(0.0, killed + delay - time.monotonic()))
                victim.start()
        self.log.recovery_s.append(recovered)
        self.log.controller_kills += 1  # counted once started again (see chaos_until)
        self.note(
            f"SIGKILL {victim.name} (leader); started again after {delay:.2f} s; "
            f"a leader answers after {recovered:.2f} s"
        )

    def kill_agent(self) -> None:
        agent = self.rng.choice(self.cluster.agents)
        delay = self.rng.uniform(0.0, 3.0)
        agent.kill()
        self.stop_event.wait(delay)
        agent.start()
        self.log.agent_kills += 1
        self.note(f"SIGKILL {agent.name}; restarted after {delay:.2f} s")


# ---------------------------------------------------------------------------- ledger


@dataclass
class TaskRun:
    name: str
    restart: int
    rank: int
    pid: int
    start: float | None = None
    end: float | None = None
    alive: float | None = None  # last refresh of its alive file
    lock_taken: bool = False  # it found the job's lock for its rank held by another run

    @property
    def last_seen(self) -> float:
        times = [t for t in (self.start, self.end, self.alive) if t is not None]
        return max(times)


def read_ledger(shared: Path) -> dict[str, list[TaskRun]]:
    runs: dict[tuple[str, int, int, int], TaskRun] = {}
    ledger = shared / "ledger"
    text = ledger.read_text() if ledger.exists() else ""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 6:
            continue
        name, restart, rank, pid, what, at = parts
        key = (name, int(restart), int(rank), int(pid))
        run = runs.setdefault(key, TaskRun(*key))
        if what == "start":
            run.start = float(at)
        elif what == "end":
            run.end = float(at)
        elif what == "overlap":
            run.lock_taken = True
    for path in (shared / "alive").iterdir():
        name, restart, rank, pid = path.name.rsplit(".", 3)
        key = (name, int(restart), int(rank), int(pid))
        if key in runs:
            runs[key].alive = path.stat().st_mtime
    by_job: dict[str, list[TaskRun]] = defaultdict(list)
    for run in runs.values():
        by_job[run.name].append(run)
    return by_job


def overlapping(runs: list[TaskRun]) -> list[tuple[TaskRun, TaskRun]]:
    """Pairs of task runs of one job that belong to different runs of it and lived at the
    same time (a run's end: its end line, else its last sign of life)."""
    found = []
    started = sorted((r for r in runs if r.start is not None), key=lambda r: r.start or 0.0)
    for i, a in enumerate(started):
        for b in started[i + 1 :]:
            same_run = a.restart == b.restart and (a.rank != b.rank or a.pid == b.pid)
            if not same_run and (b.start or 0.0) < a.last_seen:
                found.append((a, b))
    return found


# ---------------------------------------------------------------------------- the run


@dataclass
class Options:
    duration: float = 150.0
    seed: int = 1
    agents: int = 3
    cpu: int = 2
    db: str | None = None
    standby: bool = False
    submit_gap: tuple[float, float] = (0.3, 1.3)
    chaos_gap: tuple[float, float] = (3.0, 9.0)
    controller_share: float = 0.45
    plain_share: float = 0.3
    long_share: float = 0.15
    long_s: tuple[float, float] = (6.0, 12.0)  # how long those jobs run
    drain_s: float = 420.0
    keep: bool = False
    # the chaos goes on after ``duration`` until it has SIGKILLed at least this many
    # controllers and agents and this many submissions were accepted (chaos_until)
    min_kills: tuple[int, int] = (0, 0)
    min_accepted: int = 0


def list_all_jobs(client: Client) -> list[dict[str, Any]]:
    jobs = client.jobs(limit=1000)
    if len(jobs) >= 1000:
        raise RuntimeError("more than 1000 jobs: this bench lists only the newest 1000")
    return jobs


def retrying(what: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return what()
        except (ControllerError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def wait_nodes(client: Client, count: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(ControllerError, OSError):
            if sum(n["state"] == "up" for n in client.nodes()) >= count:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{count} agents did not register within {timeout} s")
        time.sleep(0.2)


KILLS_GRACE_S = 120.0


def chaos_until(chaos: Chaos, submitter: Submitter, opts: Options, poll_s: float = 0.05) -> None:
    """Let the chaos go on for ``opts.duration`` seconds, then until it has done
    ``opts.min_kills`` (controllers, agents) and ``opts.min_accepted`` submissions were
    accepted, or it failed, or KILLS_GRACE_S more seconds passed. A kill counts once its
    victim has been started again, so that the last one is not cut short (the chaos's
    waits end when it is told to stop)."""
    start = time.monotonic()
    chaos.stop_event.wait(opts.duration)
    want_controllers, want_agents = opts.min_kills
    deadline = start + opts.duration + KILLS_GRACE_S
    log = chaos.log

    def short() -> bool:
        accepted = sum(1 for sub in submitter.submissions if sub.outcome == "accepted")
        return (
            log.controller_kills < want_controllers
            or log.agent_kills < want_agents
            or accepted < opts.min_accepted
        )

    while short() and chaos.is_alive() and time.monotonic() < deadline:
        time.sleep(poll_s)


def run(opts: Options, say: Callable[[str], None] = print) -> dict[str, Any]:
    if opts.standby and not (opts.db or "").startswith("postgresql"):
        raise SystemExit("--standby needs a PostgreSQL --db")
    root = Path(tempfile.mkdtemp(prefix="fusesched-chaos-"))
    root.chmod(0o755)  # tasks run under unprivileged uids: the agents' dirs must be reachable
    shared = root / "shared"
    for folder in (shared, shared / "locks", shared / "alive"):
        folder.mkdir()
        folder.chmod(0o1777)
    (shared / "ledger").touch()
    (shared / "ledger").chmod(0o666)
    cluster = Cluster(root, opts.agents, opts.cpu, opts.db, opts.standby)
    t0 = time.monotonic()
    say(f"chaos in {root}: {len(cluster.controllers)} controller(s), {opts.agents} agents")
    try:
        cluster.start()
        client = Client(cluster.url, failover_s=30.0)
        wait_nodes(client, opts.agents)
        submitter = Submitter(cluster.url, shared, opts)
        chaos = Chaos(cluster, opts.seed, opts.chaos_gap, opts.controller_share, t0)
        say(f"{opts.agents} agents up after {time.monotonic() - t0:.1f} s")
        submitter.start()
        chaos.start()
        chaos_until(chaos, submitter, opts)
        chaos.stop_event.set()
        chaos.join()
        submitter.stop_event.set()
        submitter.join()
        chaos.revive_exited_agents()
        say(f"chaos over after {time.monotonic() - t0:.0f} s; draining")
        if chaos.error is not None:
            raise RuntimeError(f"the chaos thread failed: {chaos.error!r}")
        report = settle(client, cluster, submitter, chaos, shared, opts, t0, say)
    finally:
        cluster.stop()
        if not opts.keep:
            shutil.rmtree(root, ignore_errors=True)
    report["root"] = str(root) if opts.keep else None
    return report


def settle(
    client: Client,
    cluster: Cluster,
    submitter: Submitter,
    chaos: Chaos,
    shared: Path,
    opts: Options,
    t0: float,
    say: Callable[[str], None],
) -> dict[str, Any]:
    subs = submitter.submissions
    listed = retrying(lambda: list_all_jobs(client))
    ids_by_name: dict[str, list[str]] = defaultdict(list)
    for job in listed:
        ids_by_name[job["name"]].append(job["id"])
    # every accepted job and every uncertain one the controller turned out to know
    wanted: dict[str, Submission] = {}
    lost: list[str] = []
    for sub in subs:
        known = ids_by_name.get(sub.name, [])
        if sub.outcome == "accepted":
            assert sub.job_id is not None
            wanted[sub.job_id] = sub
            if sub.job_id not in known:
                lost.append(f"{sub.name} ({sub.job_id}): accepted, unknown to the controller")
        elif sub.outcome == "uncertain" and known:
            sub.job_id = known[0]
            wanted[known[0]] = sub
    duplicates = {n: ids for n, ids in ids_by_name.items() if len(ids) > 1}
    strangers = sorted(set(ids_by_name) - {s.name for s in subs})

    views: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + opts.drain_s
    drain_start = time.monotonic()
    while True:
        for job_id in wanted:
            if job_id in views and views[job_id]["state"] in FINISHED:
                continue
            with contextlib.suppress(ControllerError, OSError):
                views[job_id] = client.show(job_id)
        open_ = [j for j in wanted if views.get(j, {}).get("state") not in FINISHED]
        if not open_ or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    drain_s = time.monotonic() - drain_start
    for job_id in open_:
        state = views.get(job_id, {}).get("state", "unknown")
        lost.append(f"{wanted[job_id].name} ({job_id}): still {state} at the deadline")

    # stop the agents cleanly, so every task has ended before the ledger is read; the
    # controllers first (SIGKILL: nothing of theirs is read from here on), which ends the
    # agents' long polls at once
    for proc in cluster.controllers:
        proc.kill()
    stop_all(cluster.agents)
    by_job = read_ledger(shared)
    names = {sub.name: job_id for job_id, sub in wanted.items()}
    overlaps: list[str] = []
    lock_overlaps = 0
    multi_run = 0
    completed_twice = 0
    completed_no_run = 0
    task_runs = sum(len(runs) for runs in by_job.values())
    cut_short = sum(1 for runs in by_job.values() for r in runs if r.end is None)
    for name, runs in by_job.items():
        if name not in names:
            strangers.append(f"{name} (ran, not a job of the controller)")
        lock_overlaps += sum(r.lock_taken for r in runs)
        for a, b in overlapping(runs):
            overlaps.append(
                f"{name}: restart {a.restart} rank {a.rank} pid {a.pid} (alive until "
                f"{a.last_seen - b.start:+.3f} s after) and restart {b.restart} rank {b.rank} "
                f"pid {b.pid}"
                if b.start is not None
                else name
            )
        starts = {(r.restart, r.pid) for r in runs if r.rank == 0}
        if len(starts) > 1:
            multi_run += 1
        ended_runs = {r.restart for r in runs if r.rank == 0 and r.end is not None}
        if len(ended_runs) > 1:
            completed_twice += 1
    for job_id, view in views.items():
        if view["state"] == "Completed":
            runs = by_job.get(wanted[job_id].name, [])
            if not any(r.end is not None for r in runs):
                completed_no_run += 1

    states = Counter(v.get("state", "unknown") for v in views.values())
    failed_reasons = Counter(
        _reason_kind(v.get("reason", "")) for v in views.values() if v.get("state") == "Failed"
    )
    outcomes = Counter(s.outcome for s in subs)
    uncertain = [s for s in subs if s.outcome == "uncertain"]
    log = chaos.log
    report: dict[str, Any] = {
        "options": {k: v for k, v in asdict(opts).items()},
        "elapsed_s": round(time.monotonic() - t0, 1),
        "drain_s": round(drain_s, 1),
        "submitted": len(subs),
        "accepted": outcomes["accepted"],
        "uncertain": len(uncertain),
        "uncertain_accepted": sum(1 for s in uncertain if s.job_id is not None),
        "refused": outcomes["refused"],
        "single_task": sum(1 for s in subs if s.tasks == 1),
        "gangs": sum(1 for s in subs if s.tasks == 2),
        "default_policy": sum(1 for s in subs if s.policy == "default"),
        "accounted": len(views),
        "completed": states["Completed"],
        "failed": states["Failed"],
        "cancelled": states["Cancelled"],
        "failed_reasons": dict(failed_reasons),
        "task_runs": task_runs,
        "task_runs_cut_short": cut_short,
        "multi_run": multi_run,
        "completed_twice": completed_twice,
        "completed_without_run": completed_no_run,
        "lost": lost,
        "duplicates": duplicates,
        "strangers": strangers,
        "overlaps": overlaps,
        "lock_overlaps": lock_overlaps,
        "controller_kills": log.controller_kills,
        "agent_kills": log.agent_kills,
        "agent_exits": log.agent_exits,
        "recovery_s": [round(x, 3) for x in log.recovery_s],
        "takeover_s": [round(x, 3) for x in log.takeover_s],
        "events": log.events,
        "submit_errors": Counter(_error_kind(s.error) for s in subs if s.error).most_common(),
    }
    return report


def _reason_kind(reason: str) -> str:
    low = reason.lower()
    if "restarts exhausted" in low or "retry budget" in low:
        return "restart budget exhausted"
    return reason[:80] or "(no reason)"


def _error_kind(error: str) -> str:
    if "Connection refused" in error:
        return "connection refused"
    if error.startswith("no controller leads"):
        return "no controller leads"
    if "may or may not" in error or "Remote end closed" in error or "reset" in error.lower():
        return "connection broken mid-request"
    return error[:60]


def _summary(xs: list[float]) -> str:
    if not xs:
        return "-"
    return (
        f"n={len(xs)} median {statistics.median(xs):.2f} s, "
        f"min {min(xs):.2f} s, max {max(xs):.2f} s"
    )


def table(report: dict[str, Any]) -> str:
    rows = [
        ("submitted", report["submitted"]),
        ("accepted (id returned)", report["accepted"]),
        ("uncertain (connection broke)", report["uncertain"]),
        ("  of which accepted", report["uncertain_accepted"]),
        ("refused (never accepted)", report["refused"]),
        ("jobs accounted for", report["accounted"]),
        ("completed", report["completed"]),
        ("failed", f"{report['failed']} {report['failed_reasons'] or ''}".strip()),
        ("cancelled", report["cancelled"]),
        (
            "task runs (killed before their end)",
            f"{report['task_runs']} ({report['task_runs_cut_short']})",
        ),
        ("jobs run more than once", report["multi_run"]),
        ("  whose work ended in two runs", report["completed_twice"]),
        ("lost", len(report["lost"])),
        ("duplicate jobs", len(report["duplicates"])),
        ("runs overlapping (times)", len(report["overlaps"])),
        ("runs overlapping (lock)", report["lock_overlaps"]),
        ("controller kills", report["controller_kills"]),
        ("agent kills", report["agent_kills"]),
        ("agents that exited by themselves", report["agent_exits"]),
        ("kill -> a leader answers", _summary(report["recovery_s"])),
    ]
    if report["options"]["standby"]:
        rows.append(("take-over (standby answers)", _summary(report["takeover_s"])))
    rows.append(("elapsed (drain)", f"{report['elapsed_s']} s ({report['drain_s']} s)"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def problems(report: dict[str, Any]) -> list[str]:
    """What breaks the promise: lost or duplicated jobs, overlapping runs, failures for any
    reason but an exhausted restart budget."""
    out = list(report["lost"])
    out += [f"duplicate job name {n}: {ids}" for n, ids in report["duplicates"].items()]
    out += [f"unknown job {s}" for s in report["strangers"]]
    out += [f"overlap: {o}" for o in report["overlaps"]]
    if report["lock_overlaps"]:
        out.append(f"{report['lock_overlaps']} runs found their job's lock taken")
    if report["completed_without_run"]:
        out.append(f"{report['completed_without_run']} completed jobs have no finished run")
    out += [
        f"{n} failed: {why}"
        for why, n in report["failed_reasons"].items()
        if why != "restart budget exhausted"
    ]
    if report["cancelled"]:
        out.append(f"{report['cancelled']} cancelled (nobody cancels here)")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=150.0, help="seconds of chaos")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--agents", type=int, default=3)
    parser.add_argument("--cpu", type=int, default=2, help="CPUs each agent advertises")
    parser.add_argument("--db", default=None, help="database URL (default: SQLite)")
    parser.add_argument(
        "--standby", action="store_true", help="two controllers with --standby (PostgreSQL)"
    )
    parser.add_argument("--drain", type=float, default=420.0, help="seconds to let jobs end")
    parser.add_argument("--keep", action="store_true", help="keep the run's folder (logs)")
    parser.add_argument("--json", type=Path, default=None, help="write the report here")
    args = parser.parse_args(argv)
    opts = Options(
        duration=args.duration,
        seed=args.seed,
        agents=args.agents,
        cpu=args.cpu,
        db=args.db,
        standby=args.standby,
        drain_s=args.drain,
        keep=args.keep,
    )
    report = run(opts)
    sys.path.insert(0, str(ROOT / "bench"))
    from machine_info import machine

    report["machine"] = machine()
    report["problems"] = problems(report)
    print(table(report))
    for line in report["problems"]:
        print("PROBLEM:", line)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    os.umask(0o022)
    raise SystemExit(main())
