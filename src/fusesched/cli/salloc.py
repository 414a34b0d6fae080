"""``fusesched salloc``: Slurm's ``salloc`` — wait for an allocation, then run a command (by
default the user's shell) here, on the submit host, in which ``srun`` runs job steps on the
allocated nodes; release the allocation when the command exits.

The allocation is a job that holds it (:mod:`fusesched.cli.salloc_plan`: an sbatch job
whose batch script prints its hostfile and sleeps). Once it runs, salloc writes that hostfile
and fusesched's ``srun`` wrapper (:func:`fusesched.agent.step_wrapper.install_wrapper`, with
this Python) into a private folder and runs the command as its child, in its own process
group (given the terminal when salloc has it), with the allocation's environment. While the
command runs salloc looks at the job every :data:`WATCH_S`: when it has ended (its time
limit, ``fusesched cancel``) the allocation is revoked: the command's process group gets
SIGHUP, then SIGKILL after :data:`HANGUP_GRACE_S`. When the command exits, salloc releases
the job, which ends completed (the command exited 0) or failed (any other status; exit code 1),
cancelling it if it does not end at once, and exits with the command's exit status.

From its submission on, salloc holds the job (:mod:`fusesched.cli.keepalive`: it is attended,
and a thread pings the controller), so that a salloc killed outright no longer holds its
allocation once the controller's ``--inactive-limit`` has passed (Slurm's InactiveLimit).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import typer

from fusesched.cli.keepalive import Attended, Keepalive, warn
from fusesched.cli.live import CaOpt, ControllerOpt, TokenOpt, _call, _client, _fail, err
from fusesched.cli.srun import QUEUED_AFTER_S, RUN_CONTEXT
from fusesched.cli.srun_args import RunUsageError
from fusesched.cli.waiting import FINISHED, describe

T = TypeVar("T")

#: How often the job is looked at while waiting for it (at first, and at most).
POLL_MIN_S = 0.1
POLL_MAX_S = 1.0
#: How often the job is looked at while the command runs (has it ended?).
WATCH_S = 1.0
#: A running allocation whose hostfile has not come after this long is given up.
READY_WITHIN_S = 60.0
#: After SIGHUP to a revoked command's process group: how long before SIGKILL.
HANGUP_GRACE_S = 2.0
#: How long salloc waits for the holding job to end once released (then it cancels it).
RELEASE_WAIT_S = 5.0
#: How long salloc tries to cancel the job while the controller cannot be reached.
CANCEL_TRIES_S = 10.0


class _Stop(Exception):
    """A signal that ends salloc while it waits (Ctrl-C, Ctrl-\\, SIGTERM, SIGHUP)."""


class _NotReady(Exception):
    """The allocation runs but cannot be used (the message says why)."""


def _say(line: str) -> None:
    err.print(f"salloc: {line}", highlight=False, markup=False)


def _stop(signum: int, frame: Any) -> None:
    raise _Stop(signum)


def _leave_now(signum: int, frame: Any) -> None:
    sys.stderr.write("salloc: leaving without waiting for the cancellation\n")
    sys.stderr.flush()
    os._exit(1)


def wait_for_allocation(
    client: Any,
    job_id: str,
    say: Callable[[str], None],
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[dict[str, Any], list[tuple[str, int]] | None]:
    """The job once its allocation is ready, with its hostfile; or the job once ended, with
    None. Says when it waits and when it is granted."""
    from fusesched.cli.salloc_plan import read_allocation

    queued = False
    granted_at: float | None = None
    since = clock()
    pause = POLL_MIN_S
    warned: list[bool] = []
    while True:
        asked: dict[str, Any] | None = _asked(lambda: client.show(job_id), say, warned)
        if asked is None:
            sleep(POLL_MAX_S)
            continue
        job = asked
        state = job["state"]
        if state in FINISHED:
            return job, None
        held = job.get("phase") == "held"
        if state == "Pending" and not queued and (held or clock() - since >= QUEUED_AFTER_S):
            why = " (held: fusesched release lets it start)" if held else ""
            say(f"job {job_id} queued and waiting for resources{why}")
            queued = True
        if state != "Pending" and job.get("nodes"):
            if granted_at is None:
                say(f"Granted job allocation {job_id}")
                granted_at, pause = clock(), POLL_MIN_S
            output: str | None = _asked(lambda: client.logs(job_id), say, warned)
            hosts = None if output is None else read_allocation(output)
            if hosts is not None:
                return job, hosts
            if clock() - granted_at > READY_WITHIN_S:
                raise _NotReady(
                    f"job {job_id} runs but its hostfile did not come within "
                    f"{READY_WITHIN_S:.0f} s (a node of another cluster's pool?)"
                )
        sleep(pause)
        pause = min(pause * 1.5, POLL_MAX_S)


def _asked(call: Callable[[], T], say: Callable[[str], None], warned: list[bool]) -> T | None:
    """``call``'s answer; None while the controller cannot be reached (said once), so that
    a restart of it does not end the wait (a refusal, an HTTP status, still does)."""
    from fusesched.sdk import ControllerError

    try:
        return call()
    except ControllerError as exc:
        if exc.status != 0:
            raise
        if not warned:
            say(f"warning: {exc}: waiting on")
            warned.append(True)
        return None


def _cancel(client: Any, job_id: str) -> str | None:
    """Cancel the job, trying again while the controller cannot be reached; what went wrong,
    or None."""
    from fusesched.sdk import ControllerError

    deadline = time.monotonic() + CANCEL_TRIES_S
    while True:
        try:
            client.cancel(job_id)
            return None
        except ControllerError as exc:
            if exc.status != 0 or time.monotonic() >= deadline:
                return str(exc)
        time.sleep(0.5)


def _release(client: Any, job_id: str, code: int) -> bool:
    """End the holding job as the command ended (:data:`RELEASE`: completed for 0, else
    failed), as Slurm's accounting shows an allocation; whether it ended within
    :data:`RELEASE_WAIT_S` (if not, it is cancelled)."""
    from fusesched.sdk import ControllerError
    from fusesched.submit.salloc_holder import RELEASE

    try:
        client.signal(job_id, RELEASE[code == 0], main_only=True)
        deadline = time.monotonic() + RELEASE_WAIT_S
        while time.monotonic() < deadline:
            if client.show(job_id).get("state") not in ("Running", "Pending"):
                return True
            time.sleep(0.1)
    except ControllerError:
        pass
    return False


def _cancelling() -> None:
    """While the job is cancelled: Ctrl-C or SIGTERM leave at once, a hangup is ignored (a
    closed terminal must not stop the cancellation)."""
    signal.signal(signal.SIGINT, _leave_now)
    signal.signal(signal.SIGTERM, _leave_now)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def _revoke(client: Any, job_id: str) -> NoReturn:
    """Leave before the command ran: cancel the job, say so, exit 1."""
    _cancelling()
    failed = _cancel(client, job_id)
    if failed is not None:
        _fail(f"could not cancel job {job_id} ({failed}): cancel it with fusesched cancel")
    _say(f"Job allocation {job_id} has been revoked.")
    raise typer.Exit(1)


# -- the command --------------------------------------------------------------------------------


def _set_foreground(fd: int, pgid: int) -> None:
    """Make ``pgid`` the terminal's foreground process group (also from the background)."""
    old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        with contextlib.suppress(OSError):
            os.tcsetpgrp(fd, pgid)
    finally:
        signal.signal(signal.SIGTTOU, old)


def _terminal() -> int | None:
    """Standard input's terminal when salloc is in its foreground (the command then gets it,
    as a shell gives its foreground job), else None."""
    try:
        if os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp():
            return 0
    except OSError:
        pass
    return None


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pgid, signum)


def _hang_up(child: subprocess.Popen[bytes]) -> None:
    """SIGHUP to the command's process group; SIGKILL if it has not ended after
    :data:`HANGUP_GRACE_S`."""
    _signal_group(child.pid, signal.SIGHUP)
    _signal_group(child.pid, signal.SIGCONT)  # (a stopped process gets its SIGHUP)
    try:
        child.wait(timeout=HANGUP_GRACE_S)
    except subprocess.TimeoutExpired:
        _signal_group(child.pid, signal.SIGKILL)
        child.wait()


def _status(code: int) -> int:
    """A child's exit status as a shell gives it (killed by signal N: 128+N)."""
    return 128 - code if code < 0 else code


def _ended(client: Any, job_id: str, warned: list[bool]) -> bool:
    """Whether the job has ended (False, with one warning, while it cannot be asked)."""
    from fusesched.sdk import ControllerError

    try:
        return client.show(job_id)["state"] in FINISHED
    except ControllerError as exc:
        if not warned:
            _say(f"warning: cannot look at job {job_id}: {exc}")
            warned.append(True)
        return False


def run_command(
    client: Any, job_id: str, command: tuple[str, ...], env: dict[str, str], cwd: str
) -> tuple[int, bool]:
    """Run the command as salloc's child until it exits or the job ends: its exit status,
    and whether the allocation was revoked under it.

    Ctrl-C and Ctrl-\\ reach the command from the terminal (salloc passes them on when it
    gets them itself); SIGTERM or SIGHUP to salloc hang the command up (its exit status is
    then 128 + that signal)."""
    signals: list[int] = []
    for signum in (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda s, _frame: signals.append(s))
    terminal = _terminal()
    try:
        child = subprocess.Popen(command, env=env, cwd=cwd, process_group=0)
    except OSError as exc:
        _say(f"error: cannot run {command[0]} in {cwd}: {exc.strerror or exc}")
        return (127 if isinstance(exc, FileNotFoundError) else 126), False
    if terminal is not None:
        _set_foreground(terminal, child.pid)
        _signal_group(child.pid, signal.SIGCONT)  # (a shell that stopped itself to wait for it)
    warned: list[bool] = []
    look_at = time.monotonic() + WATCH_S
    try:
        while True:
            try:
                return _status(child.wait(timeout=0.1)), False
            except subprocess.TimeoutExpired:
                pass
            while signals:
                got = signals.pop(0)
                if got in (signal.SIGINT, signal.SIGQUIT):
                    _signal_group(child.pid, got)
                    continue
                _hang_up(child)
                return 128 + got, False
            if time.monotonic() >= look_at:
                if _ended(client, job_id, warned):
                    _say(f"Job allocation {job_id} has been revoked.")
                    _hang_up(child)
                    return _status(child.returncode) or 1, True
                look_at = time.monotonic() + WATCH_S
    finally:
        if terminal is not None:
            _set_foreground(terminal, os.getpgrp())


def salloc(
    ctx: typer.Context,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
) -> None:
    """Get an allocation and run a command in it, as Slurm's salloc:
    fusesched salloc [OPTIONS] [COMMAND [ARGS...]].

    The options are sbatch's (-N/--nodes, -n/--ntasks, --ntasks-per-node, -c, --mem, --gres,
    --gpus, -t/--time, -p/--partition, -q, -A, -J, -w, -x, -C, --exclusive, --reservation,
    -D/--chdir, -H/--hold, --begin, -d, ...) and end at the command (or at `--`).
    -o/-e/--open-mode, --array, --wrap, --requeue, --parsable, -W/--wait and --test-only are
    refused. `-Q`/`--quiet` leaves out salloc's own messages (not its errors).
    `--no-shell`: wait for the allocation, print it and exit 0, leaving it to its time limit
    or `fusesched cancel`.

    It waits for the allocation (saying so on stderr), then runs COMMAND (default: $SHELL,
    else /bin/sh) here, with this terminal, in the directory of -D (else this one), with
    Slurm's variables of the allocation (SLURM_JOB_ID, SLURM_JOB_NODELIST, SLURM_NNODES,
    SLURM_NTASKS, SLURM_TASKS_PER_NODE, ...) and fusesched's `srun` first on PATH: `srun`
    runs job steps on the allocated nodes, as in a batch script (`srun --pty bash`: a shell
    on the first node). When COMMAND exits salloc releases the job (COMPLETED when COMMAND
    exited 0, else FAILED) and exits with COMMAND's exit status. Ctrl-C while waiting cancels
    the request (exit 1). If the job ends while COMMAND runs (its time limit, fusesched
    cancel), COMMAND's process group gets SIGHUP and salloc exits (status 1 when COMMAND's
    is 0). Not supported: --pty (not needed), X11, images, heterogeneous jobs.

    salloc tells the controller every few seconds that it is still there (Slurm's
    InactiveLimit): if it is killed outright or stays suspended longer than the controller's
    --inactive-limit (300 s by default), the allocation is ended (TIMEOUT, reason
    InactiveLimit). With --no-shell nothing holds it: it lasts until its time limit.
    """
    from fusesched.cli.salloc_plan import (
        allocation_request,
        shell_command,
        split_salloc_args,
        told_env,
    )
    from fusesched.cli.slurm_version import print_version
    from fusesched.cli.submission import _sent
    from fusesched.model.submit_host import this_host
    from fusesched.sdk import ControllerError
    from fusesched.submit.errors import SubmitError

    try:
        parsed = split_salloc_args(list(ctx.args))
    except RunUsageError as exc:
        _fail(str(exc), 2)
    if parsed.run.help:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)
    print_version(parsed.run.version)  # (-V: the line alone, as Slurm's salloc)

    def say(line: str) -> None:
        if not parsed.run.quiet:
            _say(line)

    command = parsed.command or shell_command(os.environ)
    try:
        request, warnings = allocation_request(parsed, command)
    except SubmitError as exc:
        _fail(str(exc), 2)
    for warning in (*parsed.warnings, *warnings):
        err.print(f"[yellow]warning:[/] {warning}", highlight=False)
    own = parsed.run.own
    ca_path = Path(own["--ca"]) if own.get("--ca") else ca
    client = _client(own.get("--controller", controller_url), own.get("--token", token), ca_path)
    payload = request.model_dump(mode="json", exclude_none=True)
    # held by this salloc: ended if it goes silent (InactiveLimit); --no-shell's is left to
    # its time limit: nothing holds it
    attended = Attended(client.submit, warn)
    try:
        job_id = _call(_sent, client.submit if parsed.no_shell else attended, payload)
    except KeyboardInterrupt:  # (the answer did not come back: whether it was taken is unknown)
        _fail("interrupted while submitting: the job may have been queued (see fusesched jobs)")
    if not parsed.no_shell and not attended.older:  # (an older controller has no pings)
        Keepalive(client, job_id).start()  # (a daemon thread: it ends with salloc)
    say(f"Pending job allocation {job_id}")
    for signum in (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _stop)
    try:
        job, hosts = wait_for_allocation(client, job_id, say)
    except _Stop:
        _revoke(client, job_id)
    except (_NotReady, ControllerError) as exc:
        _say(f"error: {exc}")
        _revoke(client, job_id)
    if hosts is None:
        _fail(f"job {job_id} {describe(job)}")
    if not hosts:
        _say(f"error: job {job_id}'s hostfile lists no nodes")
        _revoke(client, job_id)
    from fusesched.hostlist import compress_hostlist

    say(f"Nodes {compress_hostlist([node for node, _ in hosts])} are ready for job")
    if parsed.no_shell:
        raise typer.Exit(0)
    try:
        told = told_env(request, this_host())
        code, revoked = _in_allocation(client, job, hosts, parsed, command, ca_path, told)
    except _Stop:  # (before the command ran: its own handling of signals was not in place)
        _revoke(client, job_id)
    except OSError as exc:  # its private folder could not be made
        _say(f"error: cannot prepare the allocation's folder: {exc}")
        _revoke(client, job_id)
    if not revoked:
        _cancelling()
        say(f"Relinquishing job allocation {job_id}")
        failed = None if _release(client, job_id, code) else _cancel(client, job_id)
        if failed is not None:
            _say(
                f"error: could not cancel job {job_id} ({failed}): cancel it with fusesched cancel"
            )
    raise typer.Exit(code)


def _in_allocation(
    client: Any,
    job: dict[str, Any],
    hosts: list[tuple[str, int]],
    parsed: Any,
    command: tuple[str, ...],
    ca: Path | None,
    told: Mapping[str, str],
) -> tuple[int, bool]:
    """Write the hostfile and the srun wrapper into a private folder, then run the command
    (:func:`run_command`) with the allocation's environment; the folder goes with it."""
    from fusesched.agent.step_wrapper import install_wrapper
    from fusesched.cli.salloc_plan import Allocation, allocation_env, hostfile_text, workdir

    cwd = os.getcwd()
    with tempfile.TemporaryDirectory(prefix=f"fusesched-salloc-{job['id']}-") as folder:
        hostfile = Path(folder) / "fusesched.hostfile"
        hostfile.write_text(hostfile_text(hosts), encoding="utf-8")
        srun_dir = install_wrapper(Path(folder))
        where = (client.url, folder, str(hostfile), str(srun_dir))
        allocation = Allocation(job, hosts, *where, told)
        ca_file = str(ca.resolve()) if ca is not None else None
        env = allocation_env(os.environ, allocation, client.token, ca_file)
        return run_command(client, str(job["id"]), command, env, workdir(parsed, cwd))


def register(app: typer.Typer) -> None:
    app.command(
        rich_help_panel="Jobs and cluster",
        context_settings=RUN_CONTEXT,
        options_metavar="[OPTIONS] [COMMAND [ARGS]...]",
    )(salloc)
