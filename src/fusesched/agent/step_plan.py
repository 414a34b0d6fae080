"""What a job step (``srun`` inside a batch job, :mod:`fusesched.agent.step`) is to do,
with no I/O: its options (:class:`StepOptions`, read from the command line by
:mod:`fusesched.agent.step_args`), the variables passed on (:func:`step_exports`,
:func:`export_vars`, :func:`option_env`), the placement of its tasks over the job's hostfile
in Slurm's block distribution (:func:`place`, :func:`step_shape`), each task's environment
and command line (:func:`task_env`, :func:`task_argv`, :class:`StepLaunch`; what a launch
may set: :func:`settable`) and the step's exit status (:func:`exit_status`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fusesched.hostlist import compress_hostlist, tasks_per_node
from fusesched.model.text import is_env_name

#: What belongs to a task's job, node or folder, never set by a launch's own variables (a
#: step's): each task's node gives it its own (folder, CPUs, devices, the CA's path), the
#: job its id, controller and credential, the controller a step's marks. ``srun`` does not
#: send them, and the controller drops them from what a launch sends (:func:`settable`).
TASK_OWN = frozenset(
    {
        "FUSESCHED_TASK_ID",
        "FUSESCHED_TASK_DIR",
        "FUSESCHED_JOB_ID",
        "FUSESCHED_CONTROLLER",
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
    }
)
_TASK_OWN_PREFIXES = ("FUSESCHED_STEP_",)  # a step's marks (controller/job_steps.py)

# Variables of the calling script not passed on to the tasks: what belongs to the task,
# a person's credential, and the shell's own.
_NOT_EXPORTED = TASK_OWN | {
    "FUSESCHED_TOKEN",  # a person's credential (srun under salloc): never into a task
    "PWD",
    "OLDPWD",
    "SHLVL",
    "_",
    "USER",
    "LOGNAME",
}


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
    overlap: bool = False  # share the running steps' slots (else wait for room)
    pty: bool = False  # one task on a terminal relayed to this one (agent/step_pty.py)
    immediate: int | None = None  # seconds to wait for room (0: none); None: as long as it takes
    # a heterogeneous job's components to run on (--het-group); None: not given (component 0)
    het_groups: tuple[int, ...] | None = None
    # GPUs (agent/step_gpus.py): --gres=gpu:N, -G/--gpus, --gpus-per-task, --gpus-per-node
    gres: int | None = None
    gpus: int | None = None
    gpus_per_task: int | None = None
    gpus_per_node: int | None = None
    mem: str | None = None  # --mem, --mem-per-cpu as given (agent/step_resources.py)
    mem_per_cpu: str | None = None
    # -i/--input as given: all, none, a task's rank or a file pattern (agent/step_stdin.py)
    input: str | None = None
    # where and how each task starts (agent/step_files.py, fusesched/step_start.py)
    chdir: str | None = None  # -D, as given (relative: to srun's folder)
    time_limit: int | None = None  # -t in seconds (whole minutes, up); 0: no limit
    signal: tuple[int, int] | None = None  # --signal: (number, seconds before -t's limit)
    task_prolog: str | None = None
    task_epilog: str | None = None
    multi_prog: bool = False  # the command is a --multi-prog configuration
    # placement (agent/step_place.py): -w, -x, -r, -m's first part
    nodelist: tuple[str, ...] | None = None
    exclude: tuple[str, ...] | None = None
    relative: int | None = None
    distribution: str | None = None  # block, cyclic, plane=N, arbitrary
    wait: int | None = None  # -W: seconds after the first task's end before the others' (0: any)
    show: str | None = None  # -h, --usage, -V: what srun prints instead of starting a step
    warnings: tuple[str, ...] = ()
    # the fields given by srun's input variables, not the command line (agent/step_defaults.py)
    inherited: frozenset[str] = frozenset()

    def given(self, field: str) -> bool:
        """Whether the command line gave ``field``, an option with a value (not left out, nor
        taken from an input variable)."""
        return getattr(self, field) is not None and field not in self.inherited


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
        if not is_env_name(name):
            raise StepError(f"--export: {name!r} is not a variable name")
        if eq:
            out[name] = value
        elif name in environ:
            out[name] = environ[name]
    return out


def step_exports(options: StepOptions, environ: Mapping[str, str]) -> dict[str, str]:
    """What the step passes its tasks of ``environ`` (the caller's) and of its own options:
    :func:`export_vars` of ``--export``, else of the job's ``SLURM_EXPORT_ENV`` (its sbatch
    ``--export``, as Slurm's srun reads it: :func:`inherited_export`), else ``ALL``; then
    :func:`option_env`."""
    spec = options.export or inherited_export(environ.get("SLURM_EXPORT_ENV", "")) or "ALL"
    return export_vars(spec, environ) | option_env(options)


def inherited_export(text: str) -> str:
    """The job's sbatch ``--export`` (``SLURM_EXPORT_ENV``, as sbatch took it: ``ALL``,
    ``NONE`` or ``NIL`` in any case, spaces around items) as the step's ``--export``: ``NONE``
    for ``NONE`` or ``NIL`` with or without variables after it (Slurm's srun passes none of
    them: sbatch gave them to the job's own environment), ``ALL`` upper-cased; "" for none."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    mode = items[0].upper() if items else ""
    if mode in ("NONE", "NIL"):
        return "NONE"
    return ",".join(["ALL", *items[1:]] if mode == "ALL" else items)


def _passed(environ: Mapping[str, str]) -> dict[str, str]:
    return {
        name: value
        for name, value in environ.items()
        if is_env_name(name)
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
            if key == "slots" and value.isascii() and value.isdigit():
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
    with no ``ntasks``, exactly that many on each node used); ignored, with a warning, when
    ``ntasks`` cannot fit in it on ``nodes`` nodes (as Slurm's srun)."""
    if not hosts:
        raise StepError("the job's hostfile lists no nodes")
    warnings: list[str] = []
    if nodes is not None and nodes > len(hosts):
        raise StepError(f"-N {nodes}: the job has only {len(hosts)} node(s)")
    fits = ntasks is None or nodes is None or per_node is None or ntasks <= per_node * nodes
    if not fits:
        warnings.append(  # (as Slurm's srun: the tasks and nodes asked for win)
            f"can't honor --ntasks-per-node set to {per_node} which doesn't match the "
            f"requested tasks {ntasks} with the number of requested nodes {nodes}. "
            "Ignoring --ntasks-per-node."
        )
        per_node = None
    used = list(hosts[:nodes] if nodes is not None else hosts)
    caps = [min(slots, per_node) if per_node is not None else slots for _, slots in used]
    if ntasks is None and per_node is not None and any(per_node > slots for _, slots in used):
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
    """(tasks, nodes) for :func:`place`: the options, else the job's ``$SLURM_NTASKS`` (else
    ``$SLURM_NPROCS``; with no ``-n``, ``-N`` or ``--ntasks-per-node`` on the command line)
    and ``$SLURM_NNODES`` (with no ``-N``; as Slurm's srun reads them: ``srun -n 2`` in a
    2-node job puts a task on each node), fewer nodes than tasks never asked for. A
    ``--ntasks-per-node`` taken from ``$SLURM_NTASKS_PER_NODE`` only caps each node."""
    per_node = options.given("ntasks_per_node")
    ntasks = options.ntasks
    if ntasks is None and not per_node and options.nodes is None:
        ntasks = _positive(environ.get("SLURM_NTASKS", environ.get("SLURM_NPROCS")))
    nodes = options.nodes
    if nodes is None:
        nodes = _positive(environ.get("SLURM_NNODES"))
        if nodes is not None and (nodes > hosts or (ntasks is not None and ntasks < nodes)):
            nodes = min(hosts, ntasks) if ntasks is not None else None
    if ntasks is None and not per_node and nodes is not None:
        ntasks = nodes  # -N alone: one task per node
    return ntasks, nodes


def _positive(text: str | None) -> int | None:
    """A count from the job's environment as Slurm's srun reads it (``+2``, ``0002``: 2);
    None for anything else, 0 included."""
    found = re.fullmatch(r"\s*\+?0*([0-9]{1,9})\s*", text or "", re.ASCII)
    return int(found[1]) if found and int(found[1]) > 0 else None


def step_tasks_per_node(tasks: Sequence[StepTask]) -> str:
    """Slurm's ``N(xK)`` form of the tasks on each node (``2(x2),1``)."""
    counts: list[int] = []
    for task in tasks:
        if task.node_index == len(counts):
            counts.append(0)
        counts[task.node_index] += 1
    return tasks_per_node(counts)


def step_slots(tasks: Sequence[StepTask]) -> dict[str, int]:
    """The step's tasks per node, in its node order: its share of the job's slots."""
    slots: dict[str, int] = {}
    for task in tasks:
        slots[task.node] = slots.get(task.node, 0) + 1
    return slots


def step_env(tasks: Sequence[StepTask], cpus_per_task: int | None) -> dict[str, str]:
    """The variables every task of the step gets alike (its id comes with each task's
    launch: the controller gives it out)."""
    nodes = list(step_slots(tasks))
    env = {
        "SLURM_STEP_NUM_TASKS": str(len(tasks)),
        "SLURM_STEP_NUM_NODES": str(len(nodes)),
        "SLURM_STEP_NODELIST": compress_hostlist(nodes),
        "SLURM_STEP_TASKS_PER_NODE": step_tasks_per_node(tasks),
        "SLURM_NTASKS": str(len(tasks)),
        "SLURM_NPROCS": str(len(tasks)),
        "WORLD_SIZE": str(len(tasks)),
    }
    if cpus_per_task is not None:
        env["SLURM_CPUS_PER_TASK"] = str(cpus_per_task)
    return env


def option_env(options: StepOptions) -> dict[str, str]:
    """What the step's tasks are told of its own options, as Slurm's srun tells them, each
    only when given on the command line (over the job's, which the script passes on, as it
    does those taken from its variables): ``SLURM_NTASKS_PER_NODE``, ``SLURM_GPUS``,
    ``SLURM_GPUS_PER_NODE`` and ``SLURM_GPUS_PER_TASK`` (their counts)."""
    given = {
        "SLURM_NTASKS_PER_NODE": "ntasks_per_node",
        "SLURM_GPUS": "gpus",
        "SLURM_GPUS_PER_NODE": "gpus_per_node",
        "SLURM_GPUS_PER_TASK": "gpus_per_task",
    }
    return {
        name: str(getattr(options, field)) for name, field in given.items() if options.given(field)
    }


def task_env(
    task: StepTask, tasks: Sequence[StepTask], cpus_per_task: int | None
) -> dict[str, str]:
    """The variables that make one task of the step what it is (Slurm's and torch's)."""
    return step_env(tasks, cpus_per_task) | {
        "SLURM_PROCID": str(task.rank),
        "SLURM_LOCALID": str(task.local_rank),
        "SLURM_NODEID": str(task.node_index),
        "SLURMD_NODENAME": task.node,
        "RANK": str(task.rank),
        "LOCAL_RANK": str(task.local_rank),
        "LOCAL_WORLD_SIZE": str(task.local_size),
        "NODE_RANK": str(task.node_index),
        "GROUP_RANK": str(task.node_index),
    }


def settable(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``env`` (a launch's own) that a task may be given: not
    :data:`TASK_OWN` or a step's marks, which the job, the node and the controller give."""
    return {
        name: value
        for name, value in env.items()
        if name not in TASK_OWN and not name.startswith(_TASK_OWN_PREFIXES)
    }


# Enters the caller's working directory where the node has it (else stays in the task's own
# folder), then becomes the command.
_ENTER = 'cd -- "$1" 2>/dev/null || :; shift; exec "$@"'


def task_argv(cwd: str, command: Sequence[str]) -> list[str]:
    """What the remote route runs for one task: ``/bin/sh -c … COMMAND`` (an argument list:
    nothing is parsed by a shell but the fixed ``_ENTER``). Its variables travel in the
    launch's environment (:class:`StepLaunch`), not here."""
    return ["/bin/sh", "-c", _ENTER, "srun-task", cwd, *command]


@dataclass(frozen=True, slots=True)
class StepLaunch:
    """One task the step starts: on ``task``'s node, ``argv``, with the variables ``env``."""

    task: StepTask
    argv: list[str]
    env: dict[str, str]

    def request(self, env_in_argv: bool = False) -> dict[str, object]:
        """This task in a step request: its variables in the launch's ``env``, which no
        command line shows; ``env_in_argv`` (a controller older than that field): as ``env
        NAME=value…`` in front of its command, as srun did before."""
        if env_in_argv:
            assigned = [f"{name}={value}" for name, value in self.env.items()]
            return {"node": self.task.node, "argv": ["env", *assigned, *self.argv]}
        return {"node": self.task.node, "argv": self.argv, "env": self.env}


def exit_status(codes: Sequence[int]) -> int:
    """The step's exit status: 0 if all are 0, else the highest (signal N: 128+N)."""
    mapped = [128 - c if c < 0 else c for c in codes]
    return max(mapped, default=0)
