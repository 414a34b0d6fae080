"""``srun``'s standard input inside a job (:mod:`fusesched.agent.step`), forwarded to the
step's tasks as Slurm's srun forwards it (``-i/--input``):

* ``all`` (the default): srun's standard input to every task;
* ``none``: to none (each task's is ``/dev/null``, as before srun forwarded anything);
* a task's rank ``N`` (below the step's task count): to that task alone, the others get
  ``/dev/null``;
* anything else (a number that is no task's too, as Slurm's srun takes it): a Slurm filename
  pattern (``%j``, ``%t``, ``%N``, ``%s``…: :mod:`fusesched.output_patterns`), the file each
  task reads as its standard input, opened where the task runs, as its user, relative to its
  working folder (as Slurm's slurmstepd opens it): nothing of it passes through srun.

srun forwards its standard input as it comes, as Slurm's srun streams it: the step starts at
once, and its tasks read what srun reads while they run (on a terminal srun forwards
nothing: its tasks get ``/dev/null``). First srun reads what is there already
(:func:`first_stdin`, for at most :data:`FIRST_WAIT_S`):

* an input that has ended by then (a here-doc, ``< file``, ``echo x |``), at most
  :data:`STDIN_MAX_BYTES` and :data:`STDIN_MAX_TOTAL` counting each task's copy, travels
  whole in the step request (``stdin``, base64, and ``stdin_task``: api/step_schemas.py);
  the controller gives it to the tasks in their launch's files (controller/steps.py), which
  their agents write into the tasks' folders and their shims open as standard input
  (agent/task_files.py, agent/task_shim.py). Empty (a batch script's own, ``/dev/null``),
  nothing is sent;
* any other (still open, or bigger) is *streamed*: srun opens a stream on the controller,
  each task that gets it starts behind a reader (:mod:`fusesched.stdin_pump`, its command
  line's first words: :func:`input_argv`) that feeds a pipe, the task's standard input,
  with what the stream brings, and srun writes into the stream what it reads, as it comes,
  until its input ends (the tasks then read its end) or the step does
  (agent/stdin_forward.py, controller/stdin_streams.py). A task that never reads its
  standard input is never held up by it; one that reads slowly holds srun's reading back.

A controller older than streams (no stream route) gets the input whole, as before: srun
reads it to its end before the step starts (:func:`read_stdin`: more than
:data:`STDIN_MAX_BYTES` is an error, nothing started). An MPI step's one task, mpirun, gets
the input either way and hands it on to its ranks (``--stdin all`` or ``--stdin N``:
:func:`mpirun_stdin`).

What srun decides here has no I/O but for :func:`first_stdin`, :func:`read_stdin` and the
file test of :func:`step_input`.
"""

from __future__ import annotations

import base64
import os
import select
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from fusesched.agent.step_plan import StepError, StepTask
from fusesched.output_patterns import expand
from fusesched.step_output import Names, names

#: The most bytes of standard input srun sends whole in the step request (more is streamed;
#: to a controller older than streams: an error).
STDIN_MAX_BYTES: Final = 16 * 1024 * 1024
#: ... and the most that all the tasks' copies of it may come to (each task's launch carries
#: its own: ``srun -n 64`` forwards at most 1 MiB).
STDIN_MAX_TOTAL: Final = 64 * 1024 * 1024
#: How long srun reads a standard input that has not ended before it says what it waits for.
SAY_WAITING_AFTER_S: Final = 5.0
#: How long srun waits for its standard input to end before it streams it instead of
#: sending it whole (seconds).
FIRST_WAIT_S: Final = 0.25
#: The module each task that reads a streamed standard input starts behind.
PUMP_MODULE: Final = "fusesched.stdin_pump"
_CHUNK = 1024 * 1024

#: The step's id in srun's expansions of a file pattern: the task puts in its own.
_STEP_MARK = "\x00step\x00"
# Opens the task's input file (its name's parts around the step's id, which srun could not
# know: the task's own $SLURM_STEP_ID goes between them) as its standard input and becomes
# the command; a file it cannot open ends it with exit status 1, said as slurmstepd says it.
_FROM_FILE = (
    'n=$1; f=$2; shift 2\nwhile [ "$n" -gt 0 ]; do f=$f$SLURM_STEP_ID$1; n=$((n-1)); shift; done\n'
    'if [ ! -e "$f" ]; then w="No such file or directory"\n'
    'elif [ -d "$f" ]; then w="Is a directory"\n'
    'elif [ ! -r "$f" ]; then w="Permission denied"\n'
    'else exec "$@" <"$f"; fi\n'
    'printf "srun: error: could not open input file %s: %s\\n" "$f" "$w" >&2; exit 1\n'
)


@dataclass(frozen=True, slots=True)
class InputMode:
    """What ``-i`` asks for: ``all`` (srun's standard input to every task), ``none``,
    ``task`` (to the one of rank ``task`` alone) or ``file`` (each task reads ``pattern``)."""

    kind: Literal["all", "none", "task", "file"]
    task: int | None = None
    pattern: str | None = None


@dataclass(frozen=True, slots=True)
class StepInput:
    """Where the step's tasks' standard input comes from: ``data`` (srun's own, read whole;
    None: nothing forwarded) for every task or (``task``) the one of that rank alone, or a
    file ``pattern`` each task opens on its node. ``streamed``: srun's input had not ended
    (``data`` is what it had read so far): it is forwarded as it comes, through the
    controller's stream ``stream`` (its id, once srun has opened it)."""

    data: bytes | None = None
    task: int | None = None
    pattern: str | None = None
    streamed: bool = False
    stream: str | None = None

    def reads(self, task: StepTask, mpi: bool = False) -> bool:
        """Whether ``task`` reads srun's input (``mpi``: it is mpirun, which hands it on)."""
        forwarded = bool(self.data) or self.streamed
        return forwarded and (mpi or self.task is None or self.task == task.rank)

    def fields(self, tasks: Sequence[StepTask], mpi: bool) -> dict[str, object]:
        """The step request's fields for it (api/step_schemas.py), its tasks being
        ``tasks`` in the request's order (``mpi``: their one launch is mpirun, which gets
        it and hands it on: :func:`mpirun_stdin`); none when nothing is forwarded, or when
        it is streamed."""
        if not self.data or self.streamed:
            return {}
        out: dict[str, object] = {"stdin": base64.b64encode(self.data).decode("ascii")}
        if self.task is not None and not mpi:
            out["stdin_task"] = next(i for i, t in enumerate(tasks) if t.rank == self.task)
        return out


#: Nothing forwarded: every task's standard input is ``/dev/null``.
NO_INPUT = StepInput()


def input_mode(text: str | None, ntasks: int, exists: Callable[[str], bool]) -> InputMode:
    """What ``-i TEXT`` (None: not given) asks of a step of ``ntasks`` tasks. ``all`` and
    ``none`` in any case, as Slurm's srun; a number that is no task's rank is a file name,
    as Slurm's srun takes it, and with no such file here (``exists``) it is refused."""
    if text is None or text.lower() == "all":
        return InputMode("all")
    if text.lower() == "none":
        return InputMode("none")
    if text.isascii() and text.isdigit() and len(text) <= 9:
        if int(text) < ntasks:
            return InputMode("task", task=int(text))
        if not exists(text):
            ranks = f"0-{ntasks - 1}" if ntasks > 1 else "0"
            raise StepError(
                f"--input={text}: the step has {ntasks} task(s) (ranks {ranks}), and there "
                f"is no file {text} to read"
            )
    return InputMode("file", pattern=text)


def step_input(
    text: str | None,
    tasks: Sequence[StepTask],
    mpi: bool,
    stdin: Callable[[], tuple[bytes | None, bool]],
) -> StepInput:
    """The step's :class:`StepInput` for ``-i TEXT`` (None: not given) over ``tasks``;
    ``stdin`` reads what srun's standard input holds already, and whether it has ended
    (:func:`first_stdin`), when it is to be forwarded: whole if it has, and fits the
    request; else streamed. Through mpirun (``mpi``) one file serves all ranks: a pattern
    of each task's or node's own is refused. :class:`StepError` when it cannot be done."""
    mode = input_mode(text, len(tasks), os.path.exists)
    if mode.kind == "none":
        return NO_INPUT
    if mode.pattern is not None:
        if mpi and _per_task(mode.pattern):
            raise StepError(
                f"--input={mode.pattern}: through mpirun the ranks read mpirun's standard "
                "input: a file of each task's or node's own (%t, %n, %N) is not supported"
            )
        return StepInput(pattern=mode.pattern)
    data, ended = stdin()
    if data is None or (ended and not data):  # (a terminal, or empty: nothing to forward)
        return NO_INPUT
    copies = 1 if mode.task is not None or mpi else len(tasks)
    if ended and len(data) <= STDIN_MAX_BYTES and len(data) * copies <= STDIN_MAX_TOTAL:
        return StepInput(data=data, task=mode.task)
    return StepInput(data=data, task=mode.task, streamed=True)


def whole_input(
    given: StepInput,
    tasks: Sequence[StepTask],
    mpi: bool,
    rest: Callable[[bytes], bytes | None],
) -> StepInput:
    """``given`` (streamed) sent whole instead, for a controller older than streams:
    ``rest`` reads srun's standard input to its end after what was read already
    (:func:`read_stdin`). :class:`StepError` when it is too big."""
    data = rest(given.data or b"") or b""
    if not data:
        return NO_INPUT
    copies = 1 if given.task is not None or mpi else len(tasks)
    if len(data) * copies > STDIN_MAX_TOTAL:
        raise StepError(
            f"standard input is forwarded whole to each task: {len(data)} bytes to {copies} "
            f"tasks is more than {STDIN_MAX_TOTAL // 2**20} MiB in all; give -i N for task "
            "N alone, -i FILE for each task to read a file on its node, or -i none"
        )
    return StepInput(data=data, task=given.task)


def first_stdin(
    fd: int = 0, wait_s: float = FIRST_WAIT_S, limit: int = STDIN_MAX_BYTES
) -> tuple[bytes | None, bool]:
    """What srun's standard input ``fd`` holds within ``wait_s`` seconds, up to its end or
    more than ``limit`` bytes, and whether it ended: (None, True) on a terminal (nothing to
    forward), ``(b"", True)`` when it is empty or closed."""
    try:
        if os.isatty(fd):
            return None, True
    except OSError:
        return b"", True
    chunks: list[bytes] = []
    size = 0
    deadline = time.monotonic() + wait_s
    while size <= limit:
        left = deadline - time.monotonic()
        try:
            ready, _, _ = select.select([fd], [], [], max(left, 0.0))
        except (OSError, ValueError):
            ready = [fd]  # (one select cannot wait on: read it as it is)
        if not ready:
            return b"".join(chunks), False
        try:
            chunk = os.read(fd, min(_CHUNK, limit + 1 - size))
        except InterruptedError:
            continue
        except BlockingIOError:  # (select said readable, someone else read it: wait again)
            continue
        except OSError:
            break  # (closed, or one that cannot be read: nothing more)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks), size <= limit


def _per_task(pattern: str) -> bool:
    """Whether ``pattern`` names a file of each task's or node's own."""
    one, other = StepTask(0, "a", 0, 0, 1), StepTask(1, "b", 1, 0, 1)
    return expand(pattern, **_names({}, one)) != expand(pattern, **_names({}, other))


def read_stdin(
    fd: int = 0,
    limit: int = STDIN_MAX_BYTES,
    say: Callable[[str], None] | None = None,
    say_after_s: float = SAY_WAITING_AFTER_S,
    head: bytes = b"",
) -> bytes | None:
    """srun's standard input ``fd`` read to its end, after ``head`` (what was read of it
    already): None on a terminal (nothing to forward), ``b""`` when it is empty or closed.
    :class:`StepError` past ``limit`` bytes. One that has not ended after ``say_after_s``
    seconds: ``say`` is told what srun waits for, once."""
    try:
        if os.isatty(fd):
            return None
    except OSError:
        return head
    chunks: list[bytes] = [head] if head else []
    size = len(head)
    if size > limit:
        raise StepError(_too_big(limit))
    started = time.monotonic()
    said = say is None
    while True:
        if not said:
            left = say_after_s - (time.monotonic() - started)
            try:
                ready, _, _ = select.select([fd], [], [], max(left, 0.0))
            except (OSError, ValueError):
                ready = [fd]  # (one select cannot wait on: read it as it is)
            if not ready:
                assert say is not None
                say(
                    "reading standard input to forward it to the step's tasks (to its end, "
                    "before they start): -i none starts them without it"
                )
                said = True
                continue
        try:
            chunk = os.read(fd, min(_CHUNK, limit + 1 - size))
        except InterruptedError:
            continue
        except BlockingIOError:  # (one left non-blocking by whoever wrote it: wait for more)
            _wait_readable(fd)
            continue
        except OSError:
            break  # (closed, or one that cannot be read: nothing more)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise StepError(_too_big(limit))
    return b"".join(chunks)


def _too_big(limit: int) -> str:
    return (
        f"standard input is more than {limit // 2**20} MiB: srun forwards it whole to the "
        "tasks, read before they start (the controller is older than streamed input); give "
        "-i FILE for each task to read a file on its node (any size), or -i none to start "
        "them without it"
    )


def _wait_readable(fd: int) -> None:
    """Wait until ``fd`` (a non-blocking one with nothing in it yet) has more, or ends."""
    try:
        select.select([fd], [], [])
    except (OSError, ValueError):
        time.sleep(0.05)  # (one select cannot wait on: try its read again shortly)


def input_argv(
    mode: StepInput,
    task: StepTask,
    environ: Mapping[str, str],
    command: Sequence[str],
    mpi: bool = False,
    python: str = sys.executable,
) -> tuple[str, ...]:
    """``command`` for ``task``, reading ``mode``'s file (if it has one) as its standard
    input: the pattern expanded with the task's values (``environ``: srun's, the job's),
    the step's id put in by the task itself (unknown to srun); or, when it reads a streamed
    input (``mpi``: it is mpirun, which hands it on), started behind its reader
    (:data:`PUMP_MODULE`, run by ``python``)."""
    if mode.stream is not None and mode.reads(task, mpi):
        return (python, "-I", "-m", PUMP_MODULE, mode.stream, "--", *command)
    if mode.pattern is None:
        return tuple(command)
    path = expand(mode.pattern, **_names(environ, task))
    first, *rest = path.split(_STEP_MARK)
    return ("/bin/sh", "-c", _FROM_FILE, "srun-input", str(len(rest)), first, *rest, *command)


def _names(environ: Mapping[str, str], task: StepTask) -> Names:
    """The values ``task``'s pattern is expanded with: the job's, its own, the step's id
    left for the task to put in."""
    values = names(environ)
    values["node"], values["node_index"] = task.node, task.node_index
    values["task"], values["step"] = task.rank, _STEP_MARK
    return values


def mpirun_stdin(mode: StepInput, command: Sequence[str]) -> list[str]:
    """mpirun's command line ``command`` handing its standard input on to every rank, or to
    ``-i N``'s alone (OpenMPI's own default is rank 0's alone)."""
    if mode == NO_INPUT:
        return list(command)
    which = "all" if mode.task is None else str(mode.task)
    return [command[0], "--stdin", which, *command[1:]]
