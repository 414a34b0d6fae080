"""``fusesched run``: Slurm's ``srun`` used outside an allocation — submit a command as a job,
wait for it to start, print its tasks' output as it comes and exit with its exit code.

The options are sbatch's: the job is built by :func:`fusesched.submit.sbatch.parse_sbatch`
with ``--wrap``, then every task runs the command itself, as srun's tasks do. The options
end at the first word that is not an option or at ``--``; the rest is the command.
:mod:`fusesched.cli.srun_args` is that split and the job, pure; :func:`run` does the rest.
Standard input is not forwarded, except with ``--pty`` (``srun --pty``): the one task then
runs on a pseudo-terminal relayed to this one (:mod:`fusesched.cli.pty_client`).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from fusesched.cli.live import CaOpt, ControllerOpt, TokenOpt, _call, _client, _fail, err
from fusesched.cli.srun_args import OWN_VALUES, PTY, RunUsageError, job_request, split_run_args
from fusesched.cli.task_output import TaskOutput, read_to_end, task_index
from fusesched.cli.waiting import FINISHED, INTERRUPTED, describe, exit_code

#: The exit status after ``~.`` (ssh's when its connection is closed).
LEFT = 255

#: A job not started this long after its submission is said to wait (as srun says it).
QUEUED_AFTER_S = 1.0


class Output:
    """The tasks' output to stdout: one task's as it comes; several tasks' a whole line at a
    time (so that their lines do not mix), with ``label`` each line prefixed with its task's
    index (``0: ``, as ``srun -l``)."""

    def __init__(self, write: Callable[[str], None], label: bool, width: int) -> None:
        self.write = write
        self.label = label
        self.width = width
        self.partial: dict[int, str] = {}
        self.whole_lines = label or width > 1

    def add(self, index: int, text: str) -> None:
        if not text:
            return
        if not self.whole_lines:
            self.write(text)
            return
        lines = (self.partial.pop(index, "") + text).split("\n")
        if lines[-1]:
            self.partial[index] = lines[-1]
        out = "".join(self._line(index, line) + "\n" for line in lines[:-1])
        if out:
            self.write(out)

    def end(self) -> None:
        """What is left of each task's last line (no newline at its end)."""
        for index in sorted(self.partial):
            self.write(self._line(index, self.partial[index]) + "\n")
        self.partial.clear()

    def _line(self, index: int, line: str) -> str:
        return f"{index:>{len(str(self.width - 1))}}: {line}" if self.label else line


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


class Progress:
    """Says when the job waits (not yet started after :data:`QUEUED_AFTER_S`, or held) and
    when it starts, once each."""

    def __init__(
        self,
        job_id: str,
        say: Callable[[str], None],
        clock: Callable[[], float],
        slurm: bool = False,
    ) -> None:
        self.job_id = job_id
        self.say = say
        self.clock = clock
        self.slurm = slurm  # (as Slurm's srun: a start is said only after a wait, its way)
        self.since = clock()
        self.queued = self.started = False

    def seen(self, job: dict[str, Any]) -> str:
        """Say what ``job`` (its record, just read) has come to; its state."""
        state: str = job["state"]
        held = job.get("phase") == "held"
        late = held or self.clock() - self.since >= QUEUED_AFTER_S
        if state == "Pending" and not self.queued and late:
            why = " (held: fusesched release lets it start)" if held else ""
            self.say(f"job {self.job_id} queued and waiting for resources{why}")
            self.queued = True
        if state != "Pending" and not self.started and job.get("nodes"):
            if not self.slurm:
                self.say(f"job {self.job_id} started on {','.join(job['nodes'])}")
            elif self.queued:
                self.say(f"job {self.job_id} has been allocated resources")
            self.started = True
        return state


def interact(
    client: Any,
    job_id: str,
    say: Callable[[str], None],
    sleep: Callable[[float], None] = time.sleep,
    poll_s: float = 0.25,
    slurm: bool = False,
) -> dict[str, Any]:
    """``--pty``: say when the job waits and starts, relay its terminal with this one's
    (:func:`fusesched.cli.pty_client.attach`) and return its final record."""
    from fusesched.cli.pty_client import attach
    from fusesched.cli.pty_endpoints import JobTerminal
    from fusesched.cli.pty_outage import through_outage

    progress = Progress(job_id, say, time.monotonic, slurm)
    while progress.seen(client.show(job_id)) == "Pending":
        sleep(poll_s)
    # (an ended job too: its output may wait in the relay)
    ended = attach(JobTerminal(client, job_id), sys.stdin.fileno(), sys.stdout.fileno(), say)

    def final() -> dict[str, Any]:
        return dict(client.wait(job_id, poll_s=0.05))

    return through_outage(final) if ended else final()  # (through a restart too)


def follow(
    client: Any,
    job_id: str,
    tasks: int,
    label: bool,
    say: Callable[[str], None],
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    poll_s: float = 0.25,
    slurm: bool = False,
) -> dict[str, Any]:
    """Say when the job waits (not yet started after :data:`QUEUED_AFTER_S`, or held) and
    when it starts, pass its tasks' output on to stdout, and return its final record once it
    has ended and every task's log is complete (:mod:`fusesched.cli.task_output`): at once,
    however much a task wrote just before the end. A log that is complete without its agent
    saying where it ends (a task lost with its node) is warned of: its end may be missing."""
    out = Output(_write, label, tasks)
    logs = TaskOutput()
    progress = Progress(job_id, say, clock, slurm)
    while True:
        job: dict[str, Any] = client.show(job_id)
        state = progress.seen(job)
        if state in FINISHED:
            read_to_end(logs, client, job, out, sleep)
            out.end()
            for task_id in sorted(logs.unconfirmed, key=task_index):
                err.print(
                    f"run: warning: task {task_index(task_id)}'s output may be missing its end "
                    "(its agent did not confirm it: the task was lost with its node, or its "
                    "agent is too old to say)",
                    highlight=False,
                    markup=False,
                )
            return job
        logs.read(client, job, out)
        sleep(poll_s)


def run(
    ctx: typer.Context,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
) -> None:
    """Run a command as a job and print its output, as Slurm's srun outside an allocation:
    fusesched run [OPTIONS] COMMAND [ARGS...].

    The options are sbatch's (-n/--ntasks, -N/--nodes, -c/--cpus-per-task, --mem, --gres,
    --gpus, --gpus-per-node, --gpus-per-task, -t/--time, -p/--partition, -q/--qos,
    -A/--account, -J/--job-name, -w, -x, -C, --exclusive, --reservation, -D/--chdir, ...),
    and end at the command (or at `--`). The job is named after the command unless -J names
    it. `-l`/`--label` prefixes each line with its task's index; without it every task's
    output is printed, a whole line at a time when there are several tasks. `-Q`/`--quiet`
    leaves out run's own messages on stderr (not its errors).

    Its tasks start in the folder run runs in, as srun's (-D names another; a relative one
    is relative to it); a node that lacks that folder, or whose job user cannot enter it,
    runs them in their task folder and says so in the output's first line.

    It waits for the job to start (saying so on stderr), prints its output as it comes and
    exits with its exit code (1 when it was cancelled, timed out or ended without one).
    Ctrl-C cancels the job (exit 130); a second Ctrl-C leaves at once. Standard input is
    forwarded only with --pty.

    --pty (srun --pty): the command (one task: not with -n above 1) runs on a pseudo-terminal
    of this terminal's TERM and size, which run relays through the controller: keystrokes
    go to it (Ctrl-C, Ctrl-D and Ctrl-Z too, as over ssh), its output comes here, window
    size changes follow, and run exits with its exit code: `fusesched run --pty -p gpu
    --gres=gpu:1 bash` is a shell on a GPU node. Standard input that is not a terminal is
    relayed as it comes (its end sends Ctrl-D once; the terminal is $LINES x $COLUMNS, else
    24 x 80): `echo 'hostname; exit 3' | fusesched run --pty bash`. Its InactiveLimit (below)
    is 30 s, or the controller's when shorter. As over ssh, `~.` at the start of a line
    leaves (cancelling the job, exit 255), even while the controller cannot be reached; `~~`
    sends one `~`. A controller restart keeps the terminal: run waits for it up to 60 s.

    --jobid ID --overlap --pty [-w NODE] [-J NAME] COMMAND (srun --jobid): run COMMAND in
    the running job ID (yours) as a step on NODE (else its first), on a terminal, with the
    job's environment: a shell beside a batch job to debug it. The job runs on after it.
    Inside an allocation (salloc, a batch script) `srun --pty bash` does the same.

    run tells the controller every few seconds that it is still there (Slurm's InactiveLimit):
    if it is killed outright or stays suspended (Ctrl-Z) longer than the controller's
    --inactive-limit (300 s by default), its job is ended (TIMEOUT, reason InactiveLimit).
    """
    from fusesched.cli.fast import submit_dir
    from fusesched.cli.keepalive import Attended, Keepalive, warn
    from fusesched.cli.pty_client import Hangup, Left, terminal, warn_anywhere
    from fusesched.cli.slurm_version import print_version
    from fusesched.cli.srun_attach import JOBID, OVERLAP, in_job
    from fusesched.cli.submission import _sent
    from fusesched.model.submit_host import this_host
    from fusesched.submit.errors import SubmitError

    try:
        parsed = split_run_args(
            list(ctx.args), own_flags=frozenset({PTY, OVERLAP}), own_values=(*OWN_VALUES, JOBID)
        )
    except RunUsageError as exc:
        _fail(str(exc), 2)
    if parsed.help:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)
    print_version(parsed.version)  # (-V: the line alone, as Slurm's srun)
    pty = PTY in parsed.own
    slurm = ctx.info_name == "srun"  # (by Slurm's name: its prefix, its words)
    prog = "srun" if slurm else "run"

    def say(line: str) -> None:
        if not parsed.quiet:
            err.print(f"{prog}: {line}", highlight=False, markup=False)

    for warning in parsed.warnings:
        err.print(f"[yellow]warning:[/] {warning}", highlight=False)
    client = _client(
        parsed.own.get("--controller", controller_url),
        parsed.own.get("--token", token),
        _path(parsed.own.get("--ca")) or ca,
    )
    if JOBID in parsed.own:  # a step in a running job (srun --jobid), not a new job
        if not pty:
            _fail(f"{JOBID}: fusesched run starts a step in a running job with --pty only", 2)
        overlap = OVERLAP in parsed.own
        args = (parsed.own[JOBID], parsed.command, parsed.options, overlap, client, _said)
        raise typer.Exit(in_job(*args))
    if OVERLAP in parsed.own:
        _fail(f"{OVERLAP}: only with {JOBID} (a step in a running job)", 2)
    try:
        request, warnings = job_request(parsed, submit_dir(), this_host())
    except SubmitError as exc:
        _fail(str(exc), 2)
    for warning in warnings:
        err.print(f"[yellow]warning:[/] {warning}", highlight=False)
    payload = request.model_dump(mode="json", exclude_none=True)
    if pty:
        if request.task_count != 1:
            _fail(
                f"--pty runs one task, on one terminal (not {request.task_count}: Slurm's "
                "srun --pty gives the terminal to task 0 alone; fusesched starts no others)",
                2,
            )
        payload["pty"] = terminal(sys.stdin.fileno(), os.environ.get("TERM")).model_dump()

    attended = Attended(client.submit, warn)  # (ended if this run goes silent: InactiveLimit)
    try:
        job_id = _call(_sent, attended, payload)
    except KeyboardInterrupt:  # (the answer did not come back: whether it was taken is unknown)
        say("interrupted while submitting: the job may have been queued (see fusesched jobs)")
        raise typer.Exit(INTERRUPTED) from None
    if not attended.older:  # (a daemon thread: it ends with run)
        Keepalive(client, job_id, warn_anywhere if pty else warn).start()
    tasks = sum(group.replicas for group in request.groups)
    signal.signal(signal.SIGINT, _first_interrupt)
    try:
        if pty:
            ended = _call(interact, client, job_id, say, slurm=slurm)
        else:
            ended = _call(follow, client, job_id, tasks, parsed.label, say, slurm=slurm)
    except KeyboardInterrupt:
        _cancel(client, job_id)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # (leaving now: no second thoughts)
        raise typer.Exit(INTERRUPTED) from None
    except Hangup as exc:  # (--pty: SIGTERM or SIGHUP, the terminal restored)
        _cancel(client, job_id)
        raise typer.Exit(128 + exc.signum) from None
    except Left:  # (--pty: ~. typed, the terminal restored)
        _cancel(client, job_id)
        raise typer.Exit(LEFT) from None
    code = exit_code(ended)
    if code:  # (said even with -Q, as srun's errors are)
        err.print(f"{prog}: job {job_id} {describe(ended)}", highlight=False, markup=False)
    raise typer.Exit(code)


def _said(line: str) -> None:
    """A message of run's on stderr, even with -Q (an error, or why it waits)."""
    err.print(f"run: {line}", highlight=False, markup=False)


def _path(text: str | None) -> Path | None:
    return Path(text) if text else None


def _first_interrupt(signum: int, frame: Any) -> None:
    """Ctrl-C while following: stop (the job is then cancelled); the next one leaves at once."""
    signal.signal(signal.SIGINT, _second_interrupt)
    raise KeyboardInterrupt


def _second_interrupt(signum: int, frame: Any) -> None:
    sys.stderr.write("run: leaving without waiting for the cancellation\n")
    sys.stderr.flush()
    os._exit(INTERRUPTED)


def _cancel(client: Any, job_id: str) -> None:
    """Ctrl-C: cancel the job (a second Ctrl-C leaves without waiting for the answer)."""
    from fusesched.sdk import ControllerError

    err.print(f"run: cancelling job {job_id}", highlight=False, markup=False)
    try:
        client.cancel(job_id)
    except ControllerError as exc:
        err.print(f"run: could not cancel job {job_id}: {exc}", highlight=False, markup=False)


#: ``run`` reads its own options (they end at the command, which may have options of its own).
RUN_CONTEXT = {
    "allow_extra_args": True,
    "ignore_unknown_options": True,
    "allow_interspersed_args": False,
    "help_option_names": [],
}


def register(app: typer.Typer) -> None:
    app.command(
        rich_help_panel="Jobs and cluster",
        context_settings=RUN_CONTEXT,
        options_metavar="[OPTIONS] COMMAND [ARGS]...",
    )(run)
