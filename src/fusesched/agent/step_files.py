"""``srun --output``, ``--error`` and ``--open-mode`` inside a job (:mod:`fusesched.agent.step`),
with no I/O: taken out of srun's command line (:func:`split_files`), then each task's command
made to start through :mod:`fusesched.step_output`, which opens the task's files where it runs
(:func:`redirected`).

A pattern is a Slurm filename pattern (``%j``, ``%t``, ``%N``…); ``none`` is ``/dev/null`` and
``all`` the default (the tasks' output printed by srun). With ``--output`` alone, standard
error goes to the same file; with ``--error`` alone, standard output is printed by srun. A file
of one task's own is emptied by that task as it starts (``--open-mode=truncate``, the default);
one that several tasks share (no ``%t`` in its name) is emptied by srun before the step starts,
then every task adds to it, so that none empties what another wrote. A shared file whose name
holds the step's id (``%s``, ``%J``), unknown until the step starts, is added to.

The same pass keeps what else each task's start applies (:class:`StepFiles`'s ``start``):
``-D``, ``-t``, ``--signal``, ``--task-prolog`` and ``--task-epilog`` make each task start
through :mod:`fusesched.step_start`, where it runs; ``--multi-prog`` gives each task its own
command, from the configuration file read here (:mod:`fusesched.agent.step_multiprog`).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from fusesched.agent.step_args import parse_args, takes_value
from fusesched.agent.step_multiprog import MultiProg, read_config
from fusesched.agent.step_plan import StepError, StepOptions, StepTask
from fusesched.output_patterns import expand
from fusesched.step_output import Names, names

#: The module each task of a step with files starts through.
REDIRECT_MODULE = "fusesched.step_output"
#: ... and the one each task starts through when its start does more (step_start.py).
START_MODULE = "fusesched.step_start"
#: srun's patterns that keep the default: the tasks' output printed by srun.
ALL = "all"
#: ... and the one that throws it away.
NONE = "none"
_OWN = {"--output": "output", "-o": "output", "--error": "error", "-e": "error"}
_OPEN_MODE = "--open-mode"


@dataclass(frozen=True, slots=True)
class StepFiles:
    """What ``--output``, ``--error`` and ``--open-mode`` asked for (patterns; None: not
    given)."""

    output: str | None = None
    error: str | None = None
    append: bool = False
    # what each task's start does besides (fusesched/step_start.py's settings)
    start: tuple[str, ...] = ()
    programs: MultiProg | None = None  # --multi-prog's configuration

    @property
    def any(self) -> bool:
        """Whether there are files (the tasks' output is not all printed by srun)."""
        return self.output is not None or self.error is not None


#: No files: the tasks' output printed by srun.
NO_FILES = StepFiles()


def split_files(argv: Sequence[str]) -> tuple[StepFiles, list[str]]:
    """srun's file options out of ``argv`` (before its command), and the rest of it;
    :class:`StepError` for a bad one."""
    found: dict[str, str] = {}
    rest: list[str] = []
    args = list(argv)
    k = 0
    while k < len(args):
        arg = args[k]
        following = args[k + 1] if k + 1 < len(args) else None
        if arg == "--" or not arg.startswith("-") or arg == "-":
            break
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if name in _OWN or name == _OPEN_MODE:
                if not eq:
                    value = _value(name, following)
                    k += 1
                found[_OWN.get(name, "open_mode")] = value
            else:
                rest.append(arg)
                if not eq and takes_value(name) and following is not None:
                    rest.append(following)
                    k += 1
            k += 1
            continue
        word, taken = _bundled(arg, following, found)
        k += taken
        if word != "-":  # (letters left besides -o/-e)
            rest.append(word)
            if _value_next(word) and k + 1 < len(args):
                rest.append(args[k + 1])
                k += 1
        k += 1
    files = _files(found)
    rest = [*rest, *args[k:]]
    options = _options(rest)
    if options is None:
        return files, rest
    programs = read_config(options.command[0]) if options.multi_prog else None
    return replace(files, start=start_settings(options), programs=programs), rest


def _options(argv: Sequence[str]) -> StepOptions | None:
    """srun's other options, read for what each task's start applies (None: bad, which the
    step's own reading says)."""
    try:
        return parse_args(argv, {})
    except StepError:
        return None


def start_settings(options: StepOptions) -> tuple[str, ...]:
    """:mod:`fusesched.step_start`'s settings for what ``options`` ask of each task's start
    (none: the task starts as it is)."""
    out: list[str] = []
    if options.chdir is not None:
        out += ["--chdir", options.chdir]
    if options.task_prolog is not None:
        out += ["--prolog", options.task_prolog]
    if options.time_limit:
        out += ["--time", str(options.time_limit)]
        if options.signal is not None:
            number, before = options.signal
            out += ["--signal", f"{number}@{min(before, options.time_limit)}"]
    if options.task_epilog is not None:
        out += ["--epilog", options.task_epilog]
    return tuple(out)


def _value(option: str, following: str | None) -> str:
    if following is None:
        raise StepError(f"{option} needs a value")
    return following


def _flag(letter: str) -> bool:
    """Whether ``-x`` takes no value at all (so another letter may follow it)."""
    return takes_value(letter) is False and letter != "-I"  # (-I5: its value attached)


def _bundled(word: str, following: str | None, found: dict[str, str]) -> tuple[str, int]:
    """``word`` (``-o``, ``-ofile``, ``-lo``, ``-lofile``) without the ``-o``/``-e`` it holds,
    whose value is put in ``found``; how many of the following words that took (0 or 1)."""
    for j in range(1, len(word)):
        letter = f"-{word[j]}"
        if letter in _OWN:
            value, taken = word[j + 1 :], 0
            if not value:
                value, taken = _value(letter, following), 1
            found[_OWN[letter]] = value
            return word[:j], taken
        if not _flag(letter):  # (a letter whose value follows it, or one srun will refuse)
            break
    return word, 0


def _value_next(word: str) -> bool:
    """Whether the short options ``word`` end with one whose value is the next word."""
    for j in range(1, len(word)):
        letter = f"-{word[j]}"
        if not _flag(letter):
            return bool(takes_value(letter)) and j == len(word) - 1
    return False


def _files(found: Mapping[str, str]) -> StepFiles:
    mode = found.get("open_mode", "truncate")
    if mode not in ("truncate", "append"):
        raise StepError(f"--open-mode takes append or truncate, not {mode!r}")

    def pattern(given: str | None, option: str) -> str | None:
        if given is None or given == ALL:
            return None
        if not given:
            raise StepError(f"--{option} needs a file name")
        if given.isascii() and given.isdigit():
            raise StepError(
                f"--{option}={given}: one task's output alone is not supported here; give a "
                "file name pattern (%t: each task's own file)"
            )
        return "/dev/null" if given == NONE else given

    return StepFiles(
        pattern(found.get("output"), "output"),
        pattern(found.get("error"), "error"),
        mode == "append",
    )


def redirected(
    files: StepFiles,
    tasks: Sequence[StepTask],
    env: Mapping[str, str],
    command: Sequence[str],
    python: str,
) -> list[tuple[str, ...]]:
    """``command`` for each of ``tasks`` (in their order), started through
    :data:`REDIRECT_MODULE` by ``python`` with its files when there are any; ``env``, srun's
    variables, gives the job's values. A task whose files are its own empties them as it
    starts (unless appending); one that shares a file adds to its files."""
    commands = [_own_command(files.programs, task, command) for task in tasks]
    if files.any:
        for k, (_, shared) in enumerate(_task_files(files, tasks, env)):
            mode = "append" if files.append or shared else "truncate"
            redirect = (python, "-I", "-m", REDIRECT_MODULE, files.output or "", files.error or "")
            if commands[k] is not None:
                commands[k] = (*redirect, mode, *commands[k])  # type: ignore[misc]
    out: list[tuple[str, ...]] = []
    for task, own in zip(tasks, commands, strict=True):
        if own is None:  # (--multi-prog: no line for it)
            said = f"--multi-prog: {files.programs.path if files.programs else ''} names no "
            said += f"program for task {task.rank}: no executable program specified for it"
            out.append((python, "-I", "-m", START_MODULE, "--fail", said, "--"))
        elif files.start:
            out.append((python, "-I", "-m", START_MODULE, *files.start, "--", *own))
        else:
            out.append(own)
    return out


def _own_command(
    programs: MultiProg | None, task: StepTask, command: Sequence[str]
) -> tuple[str, ...] | None:
    """What ``task`` runs: ``command``, or its own with ``--multi-prog`` (the arguments
    after the configuration's name added; None: no line names it)."""
    if programs is None:
        return tuple(command)
    return programs.argv(task.rank, command[1:])


def emptied(files: StepFiles, tasks: Sequence[StepTask], env: Mapping[str, str]) -> list[str]:
    """The files srun empties before the step starts: those of the tasks that share a file
    (:func:`redirected`), unless appending, whose names it can tell (not the step's id)."""
    if files.append:
        return []
    out: list[str] = []
    for paths, shared in _task_files(files, tasks, env):
        if shared:
            out.extend(p for p in paths if p not in out and UNKNOWN_STEP not in p)
    return out


def empty(path: str) -> None:
    """Empty the shared output file ``path`` before its tasks add to it, as srun does: an
    existing regular file only, never through a link, never made here (its tasks make it,
    as their own user, under the uid the node runs them as); run as root, only a file that
    is not root's (the path is the job's to choose). Nothing when it cannot."""
    try:  # (judged on the file opened, then emptied: nothing swapped in between)
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return
    try:
        found = os.fstat(fd)
        if stat.S_ISREG(found.st_mode) and not (os.geteuid() == 0 and found.st_uid == 0):
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
    finally:
        os.close(fd)


def _task_files(
    files: StepFiles, tasks: Sequence[StepTask], env: Mapping[str, str]
) -> list[tuple[list[str], bool]]:
    """Each task's files, as srun can name them, and whether it shares one of them."""
    job = names(env)
    paths = [_paths(files, _task_names(job, task)) for task in tasks]
    counts: dict[str, int] = {}
    for own in paths:
        for path in own:
            counts[path] = counts.get(path, 0) + 1
    return [(own, any(counts[p] > 1 for p in own)) for own in paths]


def _task_names(job: Names, task: StepTask) -> Names:
    """The job's values as one task's (its node, its place, its rank); the step's id is
    left unknown (:data:`UNKNOWN_STEP`)."""
    values = job.copy()
    values["node"] = task.node
    values["node_index"] = task.node_index
    values["task"] = task.rank
    values["step"] = UNKNOWN_STEP
    return values


#: The step's id in srun's own expansions, which run before the controller gives it one.
UNKNOWN_STEP = "\x00step\x00"


def _paths(files: StepFiles, values: Names) -> list[str]:
    return [expand(p, **values) for p in (files.output, files.error) if p is not None]
