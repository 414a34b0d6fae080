"""A Slurm cluster as a fusesched pool: ``sbatch`` in, ``squeue --json`` back, ``scancel`` out.

fusesched has already scheduled the job (quota, fair share, placement on the cluster's nodes);
the back end hands it to Slurm pinned to those nodes and follows it:

===================  ==============================================================
fusesched            sbatch
===================  ==============================================================
job id, name         ``--job-name`` (the name, else the id), ``--comment=fusesched:<id>``
replicas             ``--ntasks``; the nodes the core chose: ``--nodelist``, ``--nodes``
cpu per task         ``--cpus-per-task`` (whole CPUs, rounded up)
memory per task      ``--mem-per-cpu`` (MiB, rounded up)
nvidia.com/gpu       ``--gpus-per-task``
walltime_s           ``--time`` (H:MM:SS, seconds rounded up to what Slurm keeps)
signal (warning)     ``--signal=[B:]SIG@SECONDS`` (with a walltime; whole seconds, rounded
                     up): ``B:`` (the batch shell, which ``exec``\\ s the job's command) for
                     ``main_only`` and for jobs run once, so there the main process alone
                     gets it (Slurm has no "the batch's whole process group"); without it,
                     every task srun started
placement.exclusive  ``--exclusive``
user                 ``--uid`` and ``--gid`` of the user's account (never root)
workdir, submit_dir  ``--chdir``: ``workdir`` (``-D``; relative: to ``submit_dir``), else
                     ``submit_dir`` (the folder sbatch or run ran in; the script exports it as
                     ``SLURM_SUBMIT_DIR``), else the run's own folder, owned by that account.
                     A node without it: Slurm's own fallback (it runs the job in ``/tmp``)
submit_host          exported as ``SLURM_SUBMIT_HOST`` (Slurm's would be the controller's)
licenses             ``--licenses=NAME:COUNT,...`` (the Slurm cluster must define them: its
                     slurmctld refuses the job otherwise, and the job fails with its reason)
stdout, stderr       ``--output``: a file in the run's folder (stderr merged, as Slurm does
                     without ``--error``), read back as the job's log
argv, 1 task         the batch script ``exec``\\ s it; several tasks: ``srun`` starts one per
                     task, each with RANK/LOCAL_RANK/WORLD_SIZE/MASTER_ADDR set from Slurm's
                     variables (a ``torchrun`` group's also torchrun's ``PET_NNODES``,
                     ``PET_NODE_RANK``, ``PET_MASTER_ADDR``, ``PET_MASTER_PORT``); launcher
                     ``mpi`` or a script: run once, as ``sbatch`` does
script              written to a file and executed (its own ``#SBATCH`` lines are ignored:
                     fusesched's decision is what runs)
===================  ==============================================================

Commands are never pasted into a shell: argv items are quoted one by one into the generated
script (``shlex.quote``), a user's script runs from its own file, and the environment is
written as quoted ``export`` lines (``sbatch`` itself runs with a minimal environment, so the
controller's own variables never leak into jobs).

Job states come from ``squeue --json --states=all`` (Slurm keeps finished jobs there for
``MinJobAge``, 300 s by default), with ``sacct --json`` as a fallback where accounting is
enabled; :mod:`fusesched.backends.slurm_json` reads their JSON.
"""

from __future__ import annotations

import json
import logging
import math
import os
import posixpath
import pwd
import shutil
import stat
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from fusesched.backends.base import (
    BackendRejected,
    BackendUnavailable,
    RemoteJob,
    RemoteNode,
    RemoteStatus,
)
from fusesched.backends.slurm_json import MIB, parse_sinfo, parse_squeue
from fusesched.backends.slurm_script import batch_script as batch_script
from fusesched.backends.slurm_script import runs_once, task_wrapper
from fusesched.model.resources import CPU, GPU, MEMORY, Resources

log = logging.getLogger("fusesched.backends.slurm")


#: words in sbatch's error output that mean the cluster, not the job, is the problem
_UNREACHABLE: Final = (
    "unable to contact slurm controller",
    "connection refused",
    "socket timed out",
    "communication connection failure",
    "slurm_persist_conn_open",
    "zero bytes were transmitted",
    "temporarily unavailable",
)

Runner = Callable[[list[str], str | None, float], tuple[int, str, str]]


def run_command(argv: list[str], stdin: str | None, timeout_s: float) -> tuple[int, str, str]:
    """Run a Slurm command with a minimal environment; (exit status, stdout, stderr)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    try:
        done = subprocess.run(
            argv,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            check=False,
        )
    except FileNotFoundError:
        raise BackendUnavailable(f"{argv[0]} not found: is Slurm installed here?") from None
    except subprocess.TimeoutExpired:
        raise BackendUnavailable(f"{argv[0]} did not answer within {timeout_s:g} s") from None
    return done.returncode, done.stdout, done.stderr


@dataclass(frozen=True, slots=True)
class SlurmOptions:
    """A Slurm pool's settings (the ``options`` of its entry in the federation file)."""

    log_dir: Path
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    bin_dir: str | None = None  # where sbatch and friends live; None: on PATH
    timeout_s: float = 30.0
    users: Mapping[str, str] = field(default_factory=dict)  # fusesched user → cluster account
    default_user: str | None = None  # account for users with none of their own
    extra_args: tuple[str, ...] = ()  # site flags for every job (--reservation, --constraint)

    @classmethod
    def parse(cls, options: Mapping[str, object], log_dir: Path) -> SlurmOptions:
        known = {
            "partition",
            "account",
            "qos",
            "bin_dir",
            "timeout_s",
            "users",
            "default_user",
            "sbatch_args",
        }
        unknown = sorted(set(options) - known - {"log_dir"})
        if unknown:
            raise ValueError(
                f"unknown Slurm pool option(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(known))}"
            )

        def text(key: str) -> str | None:
            value = options.get(key)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"Slurm pool option {key} must be a string")
            return value

        users = options.get("users", {})
        if not isinstance(users, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in users.items()
        ):
            raise ValueError("Slurm pool option users must map user names to account names")
        timeout = options.get("timeout_s", 30.0)
        if not isinstance(timeout, int | float) or timeout <= 0:
            raise ValueError("Slurm pool option timeout_s must be a positive number")
        extra = options.get("sbatch_args", [])
        if not isinstance(extra, list) or not all(
            isinstance(a, str) and a.startswith("--") for a in extra
        ):
            raise ValueError("Slurm pool option sbatch_args must be a list of --flag=value")
        given = options.get("log_dir")
        return cls(
            log_dir=Path(given) if isinstance(given, str) else log_dir,
            partition=text("partition"),
            account=text("account"),
            qos=text("qos"),
            bin_dir=text("bin_dir"),
            timeout_s=float(timeout),
            users=dict(users),
            default_user=text("default_user"),
            extra_args=tuple(extra),
        )


# ---------------------------------------------------------------------- pure mapping


def slurm_time(seconds: float) -> str:
    """``--time`` value: H:MM:SS, rounded up to the next whole minute as Slurm keeps it."""
    minutes = max(1, math.ceil(seconds / 60))
    return f"{minutes // 60}:{minutes % 60:02d}:00"


def identity_for(user: str, options: SlurmOptions) -> tuple[int, int]:
    """(uid, gid) of the account ``user``'s jobs run under. The account must exist on the
    controller's host too (as on a cluster sharing its accounts), so that both ids are known
    and passed: ``--uid`` alone would leave the job in root's group."""
    account = account_for(user, options)
    if not _has_account(account):
        raise BackendRejected(
            f"account {account!r} is unknown on the controller's host: its uid and gid cannot "
            "be passed to Slurm (share the cluster's accounts with this host)"
        )
    entry = pwd.getpwnam(account)
    if entry.pw_uid == 0 or entry.pw_gid == 0:
        raise BackendRejected(f"account {account!r} is root's or in root's group: never")
    return entry.pw_uid, entry.pw_gid


def account_for(user: str, options: SlurmOptions) -> str:
    """The cluster account a fusesched user's jobs run under; BackendRejected when none."""
    own = user if _has_account(user) and pwd.getpwnam(user).pw_uid != 0 else None
    name = options.users.get(user) or own or options.default_user
    if not name:
        raise BackendRejected(
            f"user {user or '(none)'!r} has no account on this Slurm cluster; map it in the "
            "pool's users option or set default_user"
        )
    if name == "root" or (_has_account(name) and pwd.getpwnam(name).pw_uid == 0):
        raise BackendRejected(f"user {user!r} maps to root: jobs never run as root")
    return name


def _has_account(name: str) -> bool:
    if not name:
        return False
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def resource_args(per_task: Resources) -> list[str]:
    """sbatch options for one task's resources; BackendRejected for what Slurm cannot take."""
    args: list[str] = []
    cpus = max(1, math.ceil(per_task.get(CPU) / 1000))
    args.append(f"--cpus-per-task={cpus}")
    memory = per_task.get(MEMORY)
    if memory > 0:
        args.append(f"--mem-per-cpu={max(1, math.ceil(memory / cpus / MIB))}M")
    gpus = per_task.get(GPU)
    if gpus > 0:
        args.append(f"--gpus-per-task={gpus}")
    other = sorted(n for n, v in per_task.items() if v > 0 and n not in (CPU, MEMORY, GPU))
    if other:
        raise BackendRejected(
            f"resource(s) {', '.join(other)} have no Slurm mapping in this pool; "
            "route the job to a local or Kubernetes pool"
        )
    return args


def sbatch_args(
    job: RemoteJob,
    options: SlurmOptions,
    script_path: Path,
    identity: tuple[int, int] | None = None,
) -> list[str]:
    """The full ``sbatch`` argv for ``job`` (its batch script at ``script_path``; run as
    ``identity`` (uid, gid) when given, which a controller running as root must give)."""
    if len(job.placements) != 1:
        raise BackendRejected(
            "jobs with several task groups are not mapped onto Slurm heterogeneous jobs; "
            "route them to a local or Kubernetes pool"
        )
    placement = job.placements[0]
    request = job.request
    tasks = sum(placement.tasks_per_node.values())
    nodes = list(placement.tasks_per_node)
    sbatch = str(Path(options.bin_dir) / "sbatch") if options.bin_dir else "sbatch"
    args = [
        sbatch,
        "--parsable",
        f"--job-name={_job_name(job)}",
        f"--comment=fusesched:{job.job_id}",
        f"--ntasks={tasks}",
        f"--nodes={len(nodes)}",
        f"--nodelist={','.join(nodes)}",
        *resource_args(placement.resources),
        f"--output={run_dir(options, job) / 'out'}",
        "--open-mode=append",
        "--no-requeue",
        f"--chdir={working_dir(job, options)}",
    ]
    if request.licenses:
        held = ",".join(f"{name}:{count}" for name, count in sorted(request.licenses.items()))
        args.append(f"--licenses={held}")
    if len(set(placement.tasks_per_node.values())) == 1:
        args.append(f"--ntasks-per-node={next(iter(placement.tasks_per_node.values()))}")
    if request.walltime_s is not None:
        args.append(f"--time={slurm_time(request.walltime_s)}")
        if request.signal is not None:
            warning = request.signal
            # (a script's own steps get it without B:, as the script asked: step_warning.py)
            script = request.groups[0].script is not None
            shell = warning.main_only or (not script and runs_once(job))
            lead = math.ceil(warning.before_s)
            args.append(f"--signal={'B:' if shell else ''}{warning.name}@{lead}")
    if request.placement.exclusive:
        args.append("--exclusive")
    for flag, value in (
        ("--partition", options.partition),
        ("--account", options.account),
        ("--qos", options.qos),
    ):
        if value:
            args.append(f"{flag}={value}")
    args.extend(options.extra_args)
    if identity is not None:
        args += [f"--uid={identity[0]}", f"--gid={identity[1]}"]
    args.append(str(script_path))
    return args


def _job_name(job: RemoteJob) -> str:
    name = job.request.name or f"fusesched-{job.job_id}"
    return "".join(ch if ch.isalnum() or ch in "-_.+" else "_" for ch in name)[:128]


def working_dir(job: RemoteJob, options: SlurmOptions) -> str:
    """Where the job starts: its ``-D`` (a relative one relative to the folder it was
    submitted from, as Slurm), else that folder, else the run's own folder."""
    workdir, submitted = job.request.groups[0].workdir, job.request.submit_dir
    if workdir is not None:
        return posixpath.join(submitted, workdir) if submitted else workdir
    return submitted or str(run_dir(options, job))


def run_dir(options: SlurmOptions, job: RemoteJob) -> Path:
    """The run's own folder: its scripts and output, owned by the job's account."""
    return options.log_dir / job.run_id


# ---------------------------------------------------------------------- the driver


class SlurmBackend:
    """Drives one Slurm cluster through its command-line tools (see the module docstring)."""

    kind = "slurm"

    def __init__(self, options: SlurmOptions, runner: Runner = run_command) -> None:
        self.options = options
        self._run = runner

    def _tool(self, name: str) -> str:
        return str(Path(self.options.bin_dir) / name) if self.options.bin_dir else name

    def _call(self, argv: list[str]) -> str:
        code, out, err = self._run(argv, None, self.options.timeout_s)
        if code != 0:
            message = (err or out).strip() or f"{argv[0]} exited with status {code}"
            if any(word in message.lower() for word in _UNREACHABLE):
                raise BackendUnavailable(f"Slurm unreachable: {message}")
            raise BackendRejected(message)
        return out

    def nodes(self) -> list[RemoteNode]:
        try:
            data = json.loads(self._call([self._tool("sinfo"), "--json"]))
        except BackendRejected as exc:  # sinfo failing at all means the cluster is unusable
            raise BackendUnavailable(f"sinfo failed: {exc}") from None
        except json.JSONDecodeError as exc:
            raise BackendUnavailable(f"sinfo --json printed no JSON: {exc}") from None
        return parse_sinfo(data, self.options.partition)

    def submit(self, job: RemoteJob) -> str:
        identity = identity_for(job.request.user, self.options) if os.geteuid() == 0 else None
        try:
            folder = self._run_folder(job, identity)
            group = job.request.groups[0]
            files: dict[str, Path] = {}
            if group.script is not None:
                files["script"] = _write(folder / "user-script", group.script, 0o700, identity)
            files["wrapper"] = _write(folder / "task.sh", task_wrapper(job), 0o700, identity)
            script = _write(folder / "job.sbatch", batch_script(job, files), 0o600, None)
        except OSError as exc:  # the shared folder is gone or full: not the job's fault
            raise BackendUnavailable(f"cannot write the job's files: {exc}") from None
        out = self._call(sbatch_args(job, self.options, script, identity)).strip()
        external = out.split(";")[0]
        if not (external.isascii() and external.isdigit()):
            raise BackendRejected(f"sbatch printed no job id: {out!r}")
        return external

    def _run_folder(self, job: RemoteJob, identity: tuple[int, int] | None) -> Path:
        """A fresh folder for the run, made by the controller in its own (0755) folder, then
        handed to the job's account: nobody else can plant or swap files in it."""
        root = self.options.log_dir
        root.mkdir(parents=True, exist_ok=True)
        root.chmod(0o755)
        folder = run_dir(self.options, job)
        if folder.exists():  # a hand-over that failed half-way: start again
            shutil.rmtree(folder)
        folder.mkdir(mode=0o700)
        if identity is not None:
            os.chown(folder, *identity)
        return folder

    def cancel(self, external_id: str) -> None:
        try:
            self._call([self._tool("scancel"), external_id])
        except BackendRejected as exc:
            if "invalid job id" not in str(exc).lower():
                raise

    def release(self, external_id: str) -> None:
        """Slurm forgets finished jobs by itself (``MinJobAge``)."""

    def poll(self, external_ids: Sequence[str]) -> list[RemoteStatus]:
        if not external_ids:
            return []
        try:
            data = json.loads(self._call([self._tool("squeue"), "--json", "--states=all"]))
        except BackendRejected as exc:
            raise BackendUnavailable(f"squeue failed: {exc}") from None
        except json.JSONDecodeError as exc:
            raise BackendUnavailable(f"squeue --json printed no JSON: {exc}") from None
        found = parse_squeue(data, external_ids)
        missing = sorted(set(external_ids) - {s.external_id for s in found})
        if missing:
            found.extend(self._from_accounting(missing))
        return found

    def _from_accounting(self, external_ids: Sequence[str]) -> list[RemoteStatus]:
        """Jobs squeue forgot, from sacct where accounting is enabled (else none)."""
        argv = [self._tool("sacct"), "--json", "-j", ",".join(external_ids)]
        try:
            data = json.loads(self._call(argv))
        except (BackendRejected, BackendUnavailable, json.JSONDecodeError):
            return []
        return parse_squeue(data, external_ids)

    def logs(self, external_id: str, job: RemoteJob) -> dict[str, bytes]:
        """The run's output file, read only if it is still the job's own plain file (not a
        link a job swapped in to read someone else's file through its log)."""
        path = run_dir(self.options, job) / "out"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return {}
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            owner = identity_for(job.request.user, self.options)[0] if os.geteuid() == 0 else None
            plain = stat.S_ISREG(st.st_mode) and st.st_nlink == 1
            if not plain or (owner is not None and st.st_uid not in (owner, 0)):
                log.warning("job %s: %s is not its own output file; not read", job.job_id, path)
                return {}
            return {"stdout": f.read()}


def _write(path: Path, text: str, mode: int, owner: tuple[int, int] | None) -> Path:
    """A new file (never an existing one, never through a link) with ``mode``, given to
    ``owner`` (uid, gid) when set."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    if owner is not None:
        os.chown(path, *owner)
    return path
