"""``srun`` inside a fusesched batch job: ``python -m fusesched.agent.step [OPTIONS] COMMAND...``.

A batch script runs once, on the first node of its allocation; Slurm scripts start their work
with ``srun``, which runs COMMAND as N tasks over the allocation (a *job step*). This module
is that: the agent puts it on the PATH of ``slurm_env`` jobs' tasks as ``srun``
(:func:`install_wrapper`). Every task of the step, those on the first node included, is
started through the controller's remote route (``POST /v1/jobs/{id}/remote``, with the job's
own credential, as ``mpirun``'s launcher does), so each runs as a task of the job
(``<job>.remote.<k>``) on its node, outside the batch task's CPU pinning and memory cgroup
(which are one task's share), is killed with the job, and has its output kept by the
controller. The step follows each task's output through the log route and prints it (``-l``:
each line prefixed with the task's rank), and exits 0 if every task exited 0, else with the
highest exit code (a task killed by signal N counts as 128+N).

Placement: N tasks (``-n``, else ``$SLURM_NTASKS``) over the hostfile's nodes in allocation
order (``-N``, else ``$SLURM_NNODES``: the first N, each getting at least one task;
``--ntasks-per-node``: at most that many per node), filling each node's slots before the next
(Slurm's default block distribution).

The pure parts (:func:`parse_args`, :func:`place`, :func:`task_env`) hold no I/O.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import signal
import ssl
import stat
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import httpx

from fusesched.submit.hostlist import tasks_per_node

#: The wrapper the agent installs (``<work dir>/bin/srun``) and puts first on tasks' PATH.
WRAPPER_DIR = "bin"
WRAPPER_NAME = "srun"
#: Counter of the steps a batch task has started (in its own folder).
STEP_COUNTER = ".fusesched-steps"
POLL_MIN_S = 0.05
POLL_MAX_S = 0.5
#: After a task exited, its last output may ride a later heartbeat: wait this long for more.
DRAIN_QUIET_S = 0.6
#: After a signal: how long the step waits for its killed tasks to end.
STOP_WAIT_S = 15.0

USAGE = "usage: srun [-n NTASKS] [-N NODES] [--ntasks-per-node N] [-l] [OPTIONS] COMMAND [ARGS...]"

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Variables of the calling script not passed on to the tasks: each task's node gives it its
# own (folder, CPUs, devices, ranks), and the job's credential reaches it from the job.
_NOT_EXPORTED = frozenset(
    {
        "FUSESCHED_TASK_ID",
        "FUSESCHED_TASK_DIR",
        "FUSESCHED_NODE",
        "FUSESCHED_CPU_IDS",
        "FUSESCHED_GPU_INDICES",
        "FUSESCHED_MEMORY_LIMIT_BYTES",
        "FUSESCHED_HOSTFILE",
        "FUSESCHED_JOB_TOKEN",
        "FUSESCHED_CA",  # where this node's agent keeps the controller's CA: each node its own
        "FUSESCHED_CHECKPOINT_DIR",
        "CUDA_VISIBLE_DEVICES",
        "HOME",
        "TMPDIR",
        "PWD",
        "OLDPWD",
        "SHLVL",
        "_",
        "USER",
        "LOGNAME",
    }
)


class StepError(Exception):
    """A bad command line or an impossible placement; the message says why."""


@dataclass(frozen=True, slots=True)
class StepOptions:
    command: tuple[str, ...]
    ntasks: int | None = None
    nodes: int | None = None
    ntasks_per_node: int | None = None
    cpus_per_task: int | None = None
    label: bool = False
    mpi: str | None = None
    export: str | None = None  # as written: ALL, NONE, [ALL,]NAME=value,...
    unbuffered: bool = False
    kill_on_bad_exit: bool = False
    job_name: str | None = None
    warnings: tuple[str, ...] = ()


# option -> (field, takes a value)
_LONG: dict[str, tuple[str, bool]] = {
    "ntasks": ("ntasks", True),
    "nodes": ("nodes", True),
    "ntasks-per-node": ("ntasks_per_node", True),
    "cpus-per-task": ("cpus_per_task", True),
    "label": ("label", False),
    "mpi": ("mpi", True),
    "export": ("export", True),
    "unbuffered": ("unbuffered", False),
    "kill-on-bad-exit": ("kill_on_bad_exit", False),
    "job-name": ("job_name", True),
}
_SHORT: dict[str, str] = {
    "n": "ntasks",
    "N": "nodes",
    "c": "cpus-per-task",
    "l": "label",
    "u": "unbuffered",
    "K": "kill-on-bad-exit",
    "J": "job-name",
}
#: ``--mpi`` values taken as they are: fusesched starts the tasks itself and sets no PMI.
MPI_TYPES = frozenset({"none", "pmix", "pmix_v3", "pmix_v4", "pmi2", "cray_shasta"})


def parse_args(argv: Sequence[str]) -> StepOptions:
    """The options and command of ``srun ARGV``; :class:`StepError` for a bad one."""
    values: dict[str, object] = {}
    args = list(argv)
    k = 0
    while k < len(args):
        arg = args[k]
        if arg == "--":
            k += 1
            break
        if not arg.startswith("-") or arg == "-":
            break
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if name not in _LONG:
                raise StepError(f"unknown option --{name} (supported: {_supported()})")
            field_name, takes = _LONG[name]
            if name == "kill-on-bad-exit" and eq:  # --kill-on-bad-exit=0|1
                if value not in ("0", "1"):
                    raise StepError(f"--kill-on-bad-exit takes 0 or 1, not {value!r}")
                values[field_name] = value == "1"
                k += 1
                continue
            if takes and not eq:
                if k + 1 >= len(args):
                    raise StepError(f"--{name} needs a value")
                value = args[k + 1]
                k += 1
            elif not takes and eq:
                raise StepError(f"--{name} takes no value")
            values[field_name] = _value(name, value) if takes else True
            k += 1
            continue
        # short options: -n4, -n 4, -l, -lu, -ln4
        j = 1
        while j < len(arg):
            letter = arg[j]
            if letter not in _SHORT:
                raise StepError(f"unknown option -{letter} (supported: {_supported()})")
            name = _SHORT[letter]
            field_name, takes = _LONG[name]
            if not takes:
                values[field_name] = True
                j += 1
                continue
            value = arg[j + 1 :]
            if not value:
                if k + 1 >= len(args):
                    raise StepError(f"-{letter} needs a value")
                value = args[k + 1]
                k += 1
            values[field_name] = _value(name, value)
            break
        k += 1
    command = tuple(args[k:])
    if not command:
        raise StepError(f"no command to run\n{USAGE}")
    warnings: list[str] = []
    mpi = values.get("mpi")
    if isinstance(mpi, str) and mpi not in MPI_TYPES and mpi != "list":
        warnings.append(f"--mpi={mpi} is not known; the tasks start without any PMI")
    export = values.get("export")
    if isinstance(export, str):
        export_vars(export, {})  # refuse a bad one now
    return StepOptions(command=command, warnings=tuple(warnings), **values)  # type: ignore[arg-type]


def _supported() -> str:
    return ", ".join(f"--{name}" for name in _LONG)


def _value(name: str, text: str) -> object:
    if name in ("ntasks", "nodes", "ntasks-per-node", "cpus-per-task"):
        if not text.isdigit() or int(text) < 1:
            raise StepError(f"--{name} takes a positive whole number, not {text!r}")
        return int(text)
    if name == "job-name" and not text:
        raise StepError("--job-name needs a name")
    return text


def export_vars(spec: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables ``--export=SPEC`` passes from ``environ`` (the caller's) to the tasks:
    ``ALL`` (the default) every one, ``NONE`` none (the tasks keep the job's own, as it
    started), ``NAME=value`` or ``NAME`` items after ``ALL,`` or alone: those (a bare ``NAME``
    with the caller's value)."""
    items = [item for item in spec.split(",") if item]
    if not items:
        raise StepError("--export needs ALL, NONE or NAME=value items")
    out: dict[str, str] = {}
    if items[0] in ("ALL", "NONE"):
        if items[0] == "ALL":
            out.update(_passed(environ))
        if items[0] == "NONE" and len(items) > 1:
            raise StepError("--export=NONE takes no variables after it")
        items = items[1:]
    for item in items:
        name, eq, value = item.partition("=")
        if not _NAME_RE.fullmatch(name):
            raise StepError(f"--export: {name!r} is not a variable name")
        if eq:
            out[name] = value
        elif name in environ:
            out[name] = environ[name]
    return out


def _passed(environ: Mapping[str, str]) -> dict[str, str]:
    return {
        name: value
        for name, value in environ.items()
        if _NAME_RE.fullmatch(name)
        and name not in _NOT_EXPORTED
        and not name.startswith("OMPI_MCA_")
        and not name.startswith("SLURM_STEP")
    }


# -- placement -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StepTask:
    rank: int  # SLURM_PROCID
    node: str
    node_index: int  # SLURM_NODEID: the node's position among the step's nodes
    local_rank: int  # SLURM_LOCALID
    local_size: int  # the step's tasks on that node


def read_hostfile(text: str) -> list[tuple[str, int]]:
    """``<node> slots=<n>`` lines (fusesched's hostfile) in order."""
    out: list[tuple[str, int]] = []
    for line in text.splitlines():
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        slots = 1
        for part in parts[1:]:
            key, _, value = part.partition("=")
            if key == "slots" and value.isdigit():
                slots = int(value)
        out.append((parts[0], slots))
    return out


def place(
    hosts: Sequence[tuple[str, int]],
    ntasks: int | None,
    nodes: int | None,
    per_node: int | None,
) -> tuple[list[StepTask], list[str]]:
    """The step's tasks over ``hosts`` (block distribution), and warnings.

    ``nodes`` (``-N``): use exactly the first that many, each with at least one task; else as
    many as the tasks fill, in order. ``per_node``: at most that many tasks on a node (and
    with no ``ntasks``, exactly that many on each node used)."""
    if not hosts:
        raise StepError("the job's hostfile lists no nodes")
    warnings: list[str] = []
    if nodes is not None and nodes > len(hosts):
        raise StepError(f"-N {nodes}: the job has only {len(hosts)} node(s)")
    used = list(hosts[:nodes] if nodes is not None else hosts)
    caps = [min(slots, per_node) if per_node is not None else slots for _, slots in used]
    if per_node is not None and any(per_node > slots for _, slots in used):
        small = next(name for name, slots in used if per_node > slots)
        raise StepError(
            f"--ntasks-per-node={per_node}: node {small} has only "
            f"{dict(used)[small]} slot(s) in this job"
        )
    if ntasks is None:
        if per_node is None:
            raise StepError("how many tasks? give -n (SLURM_NTASKS is not set)")
        ntasks = per_node * len(used)
    if nodes is not None and ntasks < nodes:
        warnings.append(f"cannot run {ntasks} task(s) on {nodes} nodes: using {ntasks}")
        used, caps = used[:ntasks], caps[:ntasks]
        nodes = ntasks
    if ntasks > sum(caps):
        raise StepError(
            f"cannot place {ntasks} tasks: the job has {sum(caps)} slot(s) on "
            f"{len(used)} node(s) for this step ({', '.join(f'{n} slots={s}' for n, s in used)})"
        )
    counts = [1 if nodes is not None else 0 for _ in used]
    left = ntasks - sum(counts)
    for i, cap in enumerate(caps):
        take = min(cap - counts[i], left)
        counts[i] += take
        left -= take
    tasks: list[StepTask] = []
    node_index = 0
    for (name, _), count in zip(used, counts, strict=True):
        if count == 0:
            continue
        for local in range(count):
            tasks.append(StepTask(len(tasks), name, node_index, local, count))
        node_index += 1
    return tasks, warnings


def step_shape(
    options: StepOptions, environ: Mapping[str, str], hosts: int
) -> tuple[int | None, int | None]:
    """(tasks, nodes) for :func:`place`: the options, else the job's ``$SLURM_NTASKS`` (with
    no ``-n``, ``-N`` or ``--ntasks-per-node``) and ``$SLURM_NNODES`` (with no ``-N``; as
    Slurm's srun reads them: ``srun -n 2`` in a 2-node job puts a task on each node), fewer
    nodes than tasks never asked for."""
    ntasks = options.ntasks
    if ntasks is None and options.ntasks_per_node is None and options.nodes is None:
        ntasks = _positive(environ.get("SLURM_NTASKS"))
    nodes = options.nodes
    if nodes is None:
        nodes = _positive(environ.get("SLURM_NNODES"))
        if nodes is not None and (nodes > hosts or (ntasks is not None and ntasks < nodes)):
            nodes = min(hosts, ntasks) if ntasks is not None else None
    if ntasks is None and options.ntasks_per_node is None and nodes is not None:
        ntasks = nodes  # -N alone: one task per node
    return ntasks, nodes


def _positive(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() and int(text) > 0 else None


def step_tasks_per_node(tasks: Sequence[StepTask]) -> str:
    """Slurm's ``N(xK)`` form of the tasks on each node (``2(x2),1``)."""
    counts: list[int] = []
    for task in tasks:
        if task.node_index == len(counts):
            counts.append(0)
        counts[task.node_index] += 1
    return tasks_per_node(counts)


def task_env(
    task: StepTask, tasks: Sequence[StepTask], step_id: int, cpus_per_task: int | None
) -> dict[str, str]:
    """The variables that make one task of the step what it is (Slurm's and torch's)."""
    nodes = list(dict.fromkeys(t.node for t in tasks))
    env = {
        "SLURM_STEP_ID": str(step_id),
        "SLURM_STEPID": str(step_id),
        "SLURM_STEP_NUM_TASKS": str(len(tasks)),
        "SLURM_STEP_NUM_NODES": str(len(nodes)),
        "SLURM_STEP_NODELIST": ",".join(nodes),
        "SLURM_STEP_TASKS_PER_NODE": step_tasks_per_node(tasks),
        "SLURM_NTASKS": str(len(tasks)),
        "SLURM_NPROCS": str(len(tasks)),
        "SLURM_PROCID": str(task.rank),
        "SLURM_LOCALID": str(task.local_rank),
        "SLURM_NODEID": str(task.node_index),
        "SLURMD_NODENAME": task.node,
        "RANK": str(task.rank),
        "LOCAL_RANK": str(task.local_rank),
        "WORLD_SIZE": str(len(tasks)),
        "LOCAL_WORLD_SIZE": str(task.local_size),
        "NODE_RANK": str(task.node_index),
        "GROUP_RANK": str(task.node_index),
    }
    if cpus_per_task is not None:
        env["SLURM_CPUS_PER_TASK"] = str(cpus_per_task)
    return env


# Enters the caller's working directory where the node has it (else stays in the task's own
# folder), then becomes the command.
_ENTER = 'cd -- "$1" 2>/dev/null || :; shift; exec "$@"'


def task_argv(env: Mapping[str, str], cwd: str, command: Sequence[str]) -> list[str]:
    """What the remote route runs for one task: ``env NAME=value… /bin/sh -c … COMMAND``
    (an argument list: nothing is parsed by a shell but the fixed ``_ENTER``)."""
    return [
        "env",
        *(f"{k}={v}" for k, v in env.items()),
        "/bin/sh",
        "-c",
        _ENTER,
        "srun-task",
        cwd,
        *command,
    ]


def exit_status(codes: Sequence[int]) -> int:
    """The step's exit status: 0 if all are 0, else the highest (signal N: 128+N)."""
    mapped = [128 - c if c < 0 else c for c in codes]
    return max(mapped, default=0)


# -- the step's process -------------------------------------------------------------------------


def next_step_id(task_dir: str | None) -> int:
    """0, 1, 2… per step of the batch task (a locked counter file in its folder)."""
    if not task_dir:
        return 0
    path = Path(task_dir) / STEP_COUNTER
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError:
        return 0
    with os.fdopen(fd, "r+", encoding="ascii") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        text = f.read().strip()
        current = int(text) if text.isdigit() else 0
        f.seek(0)
        f.truncate()
        f.write(f"{current + 1}\n")
    return current


@dataclass
class _Running:
    task: StepTask
    task_id: str
    offset: int = 0
    partial: str = ""
    code: int | None = None
    reason: str = ""
    quiet_since: float | None = None  # exited and no new output since
    done: bool = False
    killed: bool = False
    notes: list[str] = field(default_factory=list)


class Step:
    """One running step: its tasks through the controller's API."""

    def __init__(self, http: httpx.Client, job_id: str, label: bool) -> None:
        self.http = http
        self.job_id = job_id
        self.label = label
        self.running: list[_Running] = []
        self.stop_signal: int | None = None

    def launch(self, task: StepTask, argv: list[str]) -> None:
        response = self.http.post(
            f"/v1/jobs/{self.job_id}/remote", json={"node": task.node, "argv": argv}
        )
        if response.status_code >= 400:
            raise StepError(f"cannot start task {task.rank} on {task.node}: {_detail(response)}")
        self.running.append(_Running(task, response.json()["task_id"]))

    def kill(self, which: Sequence[_Running]) -> None:
        for run in which:
            if run.code is None and not run.killed:
                run.killed = True
                with contextlib.suppress(httpx.HTTPError):
                    self.http.delete(f"/v1/tasks/{run.task_id}")

    def follow(self, kill_on_bad_exit: bool) -> list[int]:
        """Print the tasks' output until all have ended; their exit codes (rank order)."""
        pause = POLL_MIN_S
        stopping_at: float | None = None
        while not all(r.done for r in self.running):
            if self.stop_signal is not None and stopping_at is None:
                stopping_at = time.monotonic()
                self.kill(self.running)
            if stopping_at is not None and time.monotonic() - stopping_at > STOP_WAIT_S:
                break
            changed = False
            for run in self.running:
                if run.done:
                    continue
                if run.code is None:
                    changed |= self._status(run)
                    if run.code not in (None, 0) and kill_on_bad_exit:
                        self.kill(self.running)
                changed |= self._output(run)
            pause = POLL_MIN_S if changed else min(pause * 2, POLL_MAX_S)
            if not all(r.done for r in self.running):
                time.sleep(pause)
        for run in self.running:
            self._flush(run)
        return [r.code if r.code is not None else 128 + signal.SIGKILL for r in self.running]

    def _status(self, run: _Running) -> bool:
        try:
            response = self.http.get(f"/v1/tasks/{run.task_id}")
        except httpx.HTTPError as exc:
            run.notes.append(str(exc))
            return False
        if response.status_code in (401, 404):  # the job ended, its credential with it
            run.code, run.done = 128 + signal.SIGKILL, True
            return True
        if response.status_code >= 400:
            return False
        body = response.json()
        if body.get("state") != "exited":
            return False
        code = body.get("exit_code")
        run.code = int(code) if code is not None else 255
        run.reason = str(body.get("reason") or "")
        run.quiet_since = time.monotonic()
        return True

    def _output(self, run: _Running) -> bool:
        try:
            response = self.http.get(
                f"/v1/jobs/{self.job_id}/logs", params={"task": run.task_id, "offset": run.offset}
            )
        except httpx.HTTPError:
            return False
        text = response.text if response.status_code == 200 else ""
        if response.status_code == 200:
            run.offset = int(response.headers.get("x-next-offset", run.offset + len(text)))
        if text:
            self._print(run, text)
            if run.quiet_since is not None:
                run.quiet_since = time.monotonic()
            return True
        if run.quiet_since is not None and time.monotonic() - run.quiet_since >= DRAIN_QUIET_S:
            run.done = True
            return True
        return False

    def _print(self, run: _Running, text: str) -> None:
        lines = (run.partial + text).split("\n")
        run.partial = lines.pop()
        if lines:
            prefix = f"{run.task.rank}: " if self.label else ""
            sys.stdout.write("".join(f"{prefix}{line}\n" for line in lines))
            sys.stdout.flush()

    def _flush(self, run: _Running) -> None:
        if run.partial:
            prefix = f"{run.task.rank}: " if self.label else ""
            sys.stdout.write(f"{prefix}{run.partial}\n")
            sys.stdout.flush()
            run.partial = ""


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip() or f"HTTP {response.status_code}"
    detail = body.get("detail") if isinstance(body, dict) else None
    return str(detail) if detail else response.text.strip()


def _error(message: str) -> None:
    print(f"srun: error: {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    try:
        options = parse_args(sys.argv[1:] if argv is None else argv)
    except StepError as exc:
        _error(str(exc))
        return 2
    env = os.environ
    job_id = env.get("FUSESCHED_JOB_ID")
    url = env.get("FUSESCHED_CONTROLLER")
    if not job_id or not url:
        _error(
            "not inside a fusesched job (FUSESCHED_JOB_ID and FUSESCHED_CONTROLLER are unset): "
            "this srun runs job steps of fusesched batch jobs only"
        )
        return 2
    hostfile = env.get("FUSESCHED_HOSTFILE", "")
    try:
        hosts = read_hostfile(Path(hostfile).read_text(encoding="utf-8"))
    except OSError:
        _error(
            f"no hostfile at {hostfile or '$FUSESCHED_HOSTFILE'}: srun runs in the batch "
            "script of a job (sbatch), on its first node"
        )
        return 2
    ntasks, nodes = step_shape(options, env, len(hosts))
    try:
        tasks, warnings = place(hosts, ntasks, nodes, options.ntasks_per_node)
        exported = export_vars(options.export or "ALL", env)
    except StepError as exc:
        _error(str(exc))
        return 2
    for warning in (*options.warnings, *warnings):
        print(f"srun: warning: {warning}", file=sys.stderr, flush=True)
    step_id = next_step_id(env.get("FUSESCHED_TASK_DIR"))
    cwd = os.getcwd()
    token = env.get("FUSESCHED_JOB_TOKEN")
    headers = {"authorization": f"Bearer {token}"} if token else {}
    ca = env.get("FUSESCHED_CA")
    verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca) if ca else True
    with httpx.Client(
        base_url=url.rstrip("/"), timeout=30.0, headers=headers, verify=verify
    ) as http:
        step = Step(http, job_id, options.label)

        def stop(signum: int, _frame: FrameType | None) -> None:
            step.stop_signal = signum

        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, stop)
        try:
            for task in tasks:
                if step.stop_signal is not None:
                    break
                own = exported | task_env(task, tasks, step_id, options.cpus_per_task)
                step.launch(task, task_argv(own, cwd, options.command))
        except (StepError, httpx.HTTPError) as exc:
            _error(str(exc))
            step.kill(step.running)
            return 1
        codes = step.follow(options.kill_on_bad_exit)
        for run in step.running:
            if run.code not in (None, 0):
                why = f" ({run.reason})" if run.reason and run.reason != "exited" else ""
                code = exit_status([run.code])
                _error(
                    f"task {run.task.rank} on {run.task.node}: exited with exit code {code}{why}"
                )
    if step.stop_signal is not None:
        return 128 + step.stop_signal
    return exit_status(codes)


# -- the wrapper on tasks' PATH -----------------------------------------------------------------


def install_wrapper(work_dir: Path, python: str = sys.executable) -> Path:
    """Write ``<work_dir>/bin/srun`` (``exec <python> -I -m fusesched.agent.step "$@"``),
    readable and runnable by everyone, writable by the agent only; returns its folder.
    :class:`OSError` when ``<work_dir>/bin`` is a link or not the agent's own."""
    folder = work_dir / WRAPPER_DIR
    folder.mkdir(parents=True, exist_ok=True)
    found = os.lstat(folder)  # never through a link: chmod and the write would follow it
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid():
        raise OSError(f"{folder} is not a folder of the agent's own (a link?): not used")
    folder.chmod(0o755)
    # -I: the task's working folder and PYTHON* variables (a module of the job's own named
    # like one of fusesched's imports) must not change what the agent's python imports
    text = f'#!/bin/sh\nexec {_sh_quote(python)} -I -m fusesched.agent.step "$@"\n'
    target = folder / WRAPPER_NAME
    if target.is_file() and not target.is_symlink():
        with contextlib.suppress(OSError):
            if target.read_text(encoding="utf-8") == text:
                return folder
    scratch = folder / f".{WRAPPER_NAME}.{os.getpid()}"
    scratch.unlink(missing_ok=True)
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    os.chmod(scratch, stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    os.replace(scratch, target)
    return folder


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


if __name__ == "__main__":
    sys.exit(main())
