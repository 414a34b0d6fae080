"""``fusesched slurm-commands install|uninstall|list [DIR]``: Slurm's commands by their own
names (``sbatch``, ``squeue``, ``scontrol``…), so that pipelines and tools that call them
(workflow managers, submitit, users' scripts) run against fusesched unchanged.

Each is a small shell script that runs ``exec <fusesched> <name> "$@"``, its environment
(``FUSESCHED_CONTROLLER``, ``FUSESCHED_TOKEN``…) passed on as it is; ``--controller URL``
writes a default into them, used when ``FUSESCHED_CONTROLLER`` is not set. A script starts
with :data:`MARK`: a file of that name without it (a real Slurm's ``sbatch``, a link, a
folder) is never replaced or removed, unless ``--force`` (install only).

``srun`` inside an allocation (a batch script's task with Slurm's variables, ``fusesched
salloc``'s command: :data:`IN_ALLOCATION` set) runs a job step, as Slurm's, with the agent's
srun (:mod:`fusesched.agent.step`), not ``fusesched srun`` (a job of its own): a script that
puts this folder first on PATH (``source venv/bin/activate`` with the default folder) still
runs its steps in its own allocation.

The default folder is the one the ``fusesched`` command is in (a virtualenv's ``bin``: the
commands come and go with that installation, and are first on PATH wherever it is); without
one there (``python -m fusesched``), ``~/.local/bin``.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import stat
import sys
from pathlib import Path
from typing import Annotated, Final

import typer

from fusesched.cli.entry import HELP_MARKUP
from fusesched.cli.live import _fail

#: The commands, by Slurm's names (each runs ``fusesched <name>``).
NAMES: Final = (
    "sbatch",
    "squeue",
    "scancel",
    "scontrol",
    "sacct",
    "sinfo",
    "srun",
    "salloc",
    "seff",
    "sshare",
    "sprio",
    "sacctmgr",
)
#: The second line of every script this command writes: what it replaces and removes.
MARK: Final = "# fusesched slurm-commands wrapper"
#: What a file must have at its start to be one of ours (the rest is not read).
READ_BYTES: Final = 4096
#: The variables that say ``srun`` runs inside an allocation, where it runs a job step: those
#: the agent's srun (:mod:`fusesched.agent.step`) needs, which fusesched's batch scripts with
#: Slurm's variables and ``fusesched salloc``'s command have.
IN_ALLOCATION: Final = ("SLURM_JOB_ID", "FUSESCHED_JOB_ID", "FUSESCHED_HOSTFILE")
#: The module that runs a job step (as the agent's own ``srun`` runs it).
STEP_MODULE: Final = "fusesched.agent.step"

slurm_commands_app = typer.Typer(
    rich_markup_mode=HELP_MARKUP,
    name="slurm-commands",
    help="Slurm's commands by their own names (sbatch, squeue, scontrol, …) as small "
    "executables that run fusesched's: tools and scripts that call them run unchanged.",
    no_args_is_help=True,
)

DirArg = Annotated[
    Path | None,
    typer.Argument(
        metavar="DIR",
        help="The folder (default: the one the fusesched command is in, else ~/.local/bin).",
        show_default=False,
    ),
]


def fusesched_command() -> list[str]:
    """The command the scripts run: the ``fusesched`` beside this Python (a virtualenv's,
    where pip put it; the native front there too), else this Python with ``-m fusesched``."""
    beside = Path(sys.executable).parent / "fusesched"
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside.absolute())]
    return [str(Path(sys.executable).absolute()), "-m", "fusesched"]


def default_dir() -> Path:
    """Where the scripts go by default (see the module's docstring)."""
    command = fusesched_command()
    if len(command) == 1:
        return Path(command[0]).parent
    return Path.home() / ".local" / "bin"


def script(name: str, command: list[str], controller: str | None = None) -> str:
    """The script named ``name``: ``exec COMMAND name "$@"`` (``controller``: the
    ``FUSESCHED_CONTROLLER`` it sets when none is set); ``srun``'s runs a job step inside an
    allocation (see the module's docstring)."""
    lines = ["#!/bin/sh", MARK, f"# Slurm's {name}, answered by fusesched ({' '.join(NAMES)})"]
    if controller:
        lines.append(
            f'[ -n "${{FUSESCHED_CONTROLLER:-}}" ] || '
            f"{{ FUSESCHED_CONTROLLER={shlex.quote(controller)}; export FUSESCHED_CONTROLLER; }}"
        )
    if name == "srun":
        # -I as the agent's srun: the job's PYTHON* variables and folder change no import
        # (-P where fusesched runs as ``python -m``: it may be a user's site's)
        isolation = "-I" if len(command) == 1 else "-P"
        step = shlex.join([sys.executable, isolation, "-m", STEP_MODULE])
        inside = " && ".join(f'[ -n "${{{v}:-}}" ]' for v in IN_ALLOCATION)
        lines.append(f'if {inside}; then exec {step} "$@"; fi')
    lines.append(f'exec {shlex.join(command)} {name} "$@"')
    return "\n".join(lines) + "\n"


def ours(path: Path) -> bool:
    """Whether ``path`` is a script of this command's (a plain file with :data:`MARK`)."""
    try:
        found = os.lstat(path)
        if not stat.S_ISREG(found.st_mode):
            return False
        with path.open("rb") as f:
            head = f.read(READ_BYTES).decode("utf-8", "replace")
    except OSError:
        return False
    return MARK in head.splitlines()[:3]


def _write(path: Path, text: str) -> None:
    """``path`` holding ``text``, runnable by all, replaced whole (a link: the link itself)."""
    scratch = path.with_name(f".{path.name}.{os.getpid()}")
    scratch.unlink(missing_ok=True)
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    os.chmod(scratch, 0o755)
    os.replace(scratch, path)


def _folder(folder: Path | None) -> Path:
    chosen = (folder or default_dir()).expanduser().absolute()
    if chosen.exists() and not chosen.is_dir():
        _fail(f"{chosen} is not a folder", 2)
    return chosen


@slurm_commands_app.command("install")
def install(
    folder: DirArg = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Replace files of those names that are not ours (a real Slurm's)."
        ),
    ] = False,
    controller: Annotated[
        str | None,
        typer.Option(
            "--controller",
            help="The controller the commands use when FUSESCHED_CONTROLLER is not set.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Write `sbatch`, `squeue`, `scancel`, `scontrol`, `sacct`, `sinfo`, `srun`, `salloc`,
    `seff`, `sshare`, `sprio` and `sacctmgr` into DIR, each running `fusesched <name>`. A
    file of one of those names that is not one of ours (a real Slurm's `sbatch`) is left
    alone and said (exit 1) unless --force. Says when DIR is not on PATH, or when another
    program of one of those names comes first there."""
    where = _folder(folder)
    command = fusesched_command()
    try:
        where.mkdir(parents=True, exist_ok=True)
        written, skipped = [], []
        for name in NAMES:
            path = where / name
            if (path.exists() or path.is_symlink()) and not ours(path) and not force:
                skipped.append(name)
                continue
            if path.is_dir() and not path.is_symlink():
                skipped.append(name)
                continue
            _write(path, script(name, command, controller))
            written.append(name)
    except OSError as exc:
        _fail(f"cannot write in {where}: {exc.strerror or exc}")
    if written:
        typer.echo(f"installed in {where}: {' '.join(written)} (running {shlex.join(command)})")
    _paths_note(where, written)
    for name in skipped:
        typer.echo(
            f"error: {where / name} is not fusesched's (a real Slurm's?): left alone "
            "(--force replaces it)",
            err=True,
        )
    if skipped:
        raise typer.Exit(1)


def _paths_note(where: Path, written: list[str]) -> None:
    """Say when ``where`` is not on PATH, what comes before its commands there, or which
    other program of the same name (a real Slurm's) they now hide."""
    if not written:
        return
    on_path = [Path(p).absolute() for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    if where not in on_path:
        typer.echo(f"note: {where} is not on PATH: add it first", err=True)
        return
    later = os.pathsep.join(str(p) for p in on_path[on_path.index(where) + 1 :] if p != where)
    hidden: dict[Path, list[str]] = {}
    for name in written:
        found = shutil.which(name)
        if found is not None and Path(found).absolute() != where / name:
            typer.echo(f"note: {found} comes before {where / name} on PATH", err=True)
            continue
        other = shutil.which(name, path=later)
        if other is not None and not ours(Path(other)):
            hidden.setdefault(Path(other).parent, []).append(name)
    for folder, names in hidden.items():
        typer.echo(
            f"note: {where}'s {' '.join(names)} now come before {folder}'s on PATH (a real "
            "Slurm's?): what runs them with this PATH runs fusesched's (a fusesched Slurm pool "
            f"of that Slurm on this host: give it bin_dir: {folder})",
            err=True,
        )


@slurm_commands_app.command("uninstall")
def uninstall(folder: DirArg = None) -> None:
    """Remove the commands `install` wrote into DIR (files of those names that are not
    ours are left alone)."""
    where = _folder(folder)
    removed = []
    for name in NAMES:
        path = where / name
        if ours(path):
            try:
                path.unlink()
            except OSError as exc:
                _fail(f"cannot remove {path}: {exc.strerror or exc}")
            removed.append(name)
    typer.echo(f"removed from {where}: {' '.join(removed)}" if removed else f"none in {where}")


@slurm_commands_app.command("list")
def list_(folder: DirArg = None) -> None:
    """Each of Slurm's command names in DIR: ours (and what it runs), another program's,
    or absent."""
    where = _folder(folder)
    for name in NAMES:
        path = where / name
        if ours(path):
            runs = ""
            with contextlib.suppress(OSError):
                runs = path.read_text(encoding="utf-8").rstrip("\n").rsplit("\n", 1)[-1]
            said = f"fusesched's: {runs.removeprefix('exec ')}"
        elif path.exists() or path.is_symlink():
            said = "another program's (left alone)"
        else:
            said = "absent"
        typer.echo(f"{path}: {said}")


def register(app: typer.Typer) -> None:
    app.add_typer(slurm_commands_app, rich_help_panel="Slurm's commands")
