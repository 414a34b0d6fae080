"""Reading ``#SBATCH`` directives and sbatch's command-line options, as Slurm's ``sbatch``
reads them: the option tables, :class:`Reader` (the options given, warnings for those
fusesched does not take, errors located at their line) and :func:`scan` (the directives of a
script's header; ``#SBATCH hetjob`` lines start a heterogeneous job's next component, read
into a reader of its own: :attr:`Reader.components`). :mod:`fusesched.submit.sbatch` turns
what was read into a job.
"""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from fusesched.submit.errors import SubmitError
from fusesched.submit.sbatch_words import FLAG, SLURM_OPTIONS, SLURM_SHORT, VALUE

COMMAND_LINE: Final = "command line"

SHORT_OPTIONS: Final = {
    "A": "account",
    "a": "array",
    "C": "constraint",
    "c": "cpus-per-task",
    "D": "chdir",
    "d": "dependency",
    "e": "error",
    "G": "gpus",
    "H": "hold",
    "J": "job-name",
    "N": "nodes",
    "n": "ntasks",
    "o": "output",
    "p": "partition",
    "q": "qos",
    "t": "time",
    "w": "nodelist",
    "x": "exclude",
    "W": "wait",
    "L": "licenses",
}
#: Slurm's other names for options (``--tasks-per-node`` is ``--ntasks-per-node``).
LONG_ALIASES: Final = {"tasks-per-node": "ntasks-per-node"}
VALUE_OPTIONS: Final = frozenset(
    {
        *SHORT_OPTIONS.values(),
        "ntasks-per-node",
        "mem",
        "mem-per-cpu",
        "gres",
        "gpus-per-node",
        "gpus-per-task",
        "wrap",
        "begin",
        "signal",
        "reservation",
        "licenses",
        "mail-type",
        "mail-user",
        "mem-per-gpu",
        "cpus-per-gpu",
        "comment",
        "priority",  # (with --nice: submit/sbatch_options.py reads them)
        "export",
        "kill-on-invalid-dep",
        "open-mode",
        "deadline",
    }
)
# --exclusive and --nice may take a value too (written --nice=N)
FLAG_OPTIONS: Final = frozenset({"exclusive", "hold", "nice", "requeue", "no-requeue"})
#: Flags kept under another's name, so that the last one given wins (``--no-requeue``).
_FLAG_KEYS: Final = {"no-requeue": "requeue"}
#: Options fusesched cannot honour, with the reason their warning gives.
_IGNORED_WHY: Final = {
    "tmp": "nodes do not advertise local disk space",
    "time-min": "a job's time limit is its --time, never shortened to start it sooner",
}
#: Options taken without a word, as Slurm's sbatch takes them: ``--get-user-env[=[TIMEOUT]
#: [S|L]]`` (a job inherits the submitting environment, ``--export=ALL``: what it asks for,
#: the user's variables, the job has already; batchspawner's and pysqa's scripts give it) and
#: ``-V``/``--version`` in a script's ``#SBATCH`` line (ignored by Slurm's sbatch there; on
#: the command line it prints the version and submits nothing: submit/sbatch_words.py).
_SILENT: Final = frozenset({"get-user-env", "version"})
#: ``--get-user-env``'s values that Slurm's sbatch takes: a mode (S or L, any case: what
#: follows it is not read), or a timeout in seconds, then a mode or nothing.
_USER_ENV_VALUE: Final = re.compile(r"[SsLl].*|\d*(?:[SsLl].*)?", re.DOTALL)
#: Options for the submitting command, not for the job (``--parsable``, ``-W/--wait``): a script
#: may give them in ``#SBATCH`` lines, as Slurm allows; the command reads them with
#: :func:`command_flags` and the job ignores them.
COMMAND_FLAGS: Final = frozenset({"parsable", "wait"})
#: The directive that separates a heterogeneous job's components (``packjob``: Slurm's older
#: word for it), alone on its ``#SBATCH`` line.
HETJOB_WORDS: Final = frozenset({"hetjob", "packjob"})


@dataclass(frozen=True, slots=True)
class Directive:
    option: str  # as written: "-N" or "--nodes"
    value: str
    line: int | None  # None: from the command line


class Reader:
    """Collects directives, warnings and located errors for one script."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.options: dict[str, Directive] = {}
        self.warnings: list[str] = []
        self.wrapping = False  # --wrap on the command line: there is no script file
        # a heterogeneous job's components after the first (the first reader's only), each
        # read from the lines after its ``#SBATCH hetjob``
        self.components: list[Reader] = []
        self.separator: int | None = None  # the line of the hetjob directive that began it

    def add_component(self, line: int | None) -> Reader:
        """A reader for the next component of a heterogeneous job, begun at ``line`` (its
        warnings go with this reader's)."""
        component = Reader(self.source)
        component.warnings = self.warnings
        component.wrapping = self.wrapping
        component.separator = line
        self.components.append(component)
        return component

    def where(self, line: int | None) -> str:
        return COMMAND_LINE if line is None else f"{self.source}:{line}"

    def error(self, message: str, line: int | None, option: str | None = None) -> SubmitError:
        return SubmitError(
            message,
            source=COMMAND_LINE if line is None else self.source,
            line=line,
            field=option,
        )

    def fail(self, name: str, message: str) -> SubmitError:
        directive = self.options[name]
        return self.error(message, directive.line, directive.option)

    def read(self, given: Sequence[str], line: int | None) -> None:
        tokens = list(given)
        i = 0
        while i < len(tokens):
            token = tokens[i]
            i += 1
            if token.startswith("--") and len(token) > 2:
                written, has_value, value = token.partition("=")
                name = LONG_ALIASES.get(written[2:], written[2:])
            elif token.startswith("-") and len(token) > 1 and not token.startswith("--"):
                written, value = token[:2], token[2:]
                name = SHORT_OPTIONS.get(token[1]) or SLURM_SHORT.get(token[1], "")
                if value and SLURM_OPTIONS.get(name) == FLAG:  # (-HV, -vN2: flags run
                    tokens.insert(i, f"-{value}")  # together, as Slurm's getopt reads them)
                    value = ""
                has_value = "=" if value else ""
            elif line is None and self.wrapping:
                raise self.error(
                    f"unexpected argument {token!r}: give a batch script or --wrap, not both "
                    "(--wrap's command stands for the script)",
                    line,
                )
            elif line is None:
                raise self.error(
                    f"unexpected argument {token!r}: give sbatch options only (the script's "
                    "own arguments are not supported)",
                    line,
                )
            elif token in HETJOB_WORDS:
                raise self.error(
                    f"{token} separates the components of a heterogeneous job: put it alone "
                    f"on its own line (#SBATCH {token})",
                    line,
                )
            else:
                raise self.error(
                    f"unexpected word {token!r} (an option's value goes with it, as "
                    "--nodes=2 or -N 2)",
                    line,
                )
            if name in FLAG_OPTIONS:
                self.options[_FLAG_KEYS.get(name, name)] = Directive(written, value, line)
                continue
            if name in COMMAND_FLAGS:
                if has_value:
                    raise self.error(f"{written} takes no value", line, written)
                self.options[name] = Directive(written, "", line)
                continue
            if name == "test-only":  # ignored, it would submit what was meant to be tried
                raise self.error(
                    "it submits nothing, so a submission cannot carry it: give "
                    "it to the command (fusesched sbatch --test-only … SCRIPT)",
                    line,
                    written,
                )
            if name in _SILENT:
                _check_silent(self, name, written, value if has_value else None, line)
                continue
            if name not in VALUE_OPTIONS:
                self.warnings.append(
                    f"{self.where(line)}: {written} is not supported{_hint(name, written)}; ignored"
                )
                takes = SLURM_OPTIONS.get(name)  # (None: no option of Slurm's)
                if takes in (VALUE, None) and not has_value and i < len(tokens):
                    i += not tokens[i].startswith("-")  # its value
                continue
            if not has_value:
                if i >= len(tokens):
                    raise self.error(f"{written} needs a value", line, written)
                value = tokens[i]
                i += 1
            self.options[name] = Directive(written, value.strip(), line)

    def value(self, name: str) -> str | None:
        directive = self.options.get(name)
        return None if directive is None else directive.value

    def count(self, name: str, minimum: int = 1) -> int | None:
        text = self.value(name)
        if text is None:
            return None
        if not digits(text) or int(text) < minimum:
            raise self.fail(name, f"expected a whole number ≥ {minimum}, got {text!r}")
        return int(text)


def _hint(name: str, written: str) -> str:
    """What a warning about an option fusesched does not take adds: why, for one it cannot
    honour (:data:`_IGNORED_WHY`); the closest option, for one that is no option of Slurm's
    sbatch (a misspelling: ``--partiton``); nothing for another of Slurm's (``--mincpus``:
    a suggestion would only mislead)."""
    if name in _IGNORED_WHY:
        return f": {_IGNORED_WHY[name]}"
    if name in SLURM_OPTIONS or name in LONG_ALIASES.values():
        return ""
    known = sorted({f"--{o}" for o in (*VALUE_OPTIONS, *FLAG_OPTIONS, *SLURM_OPTIONS)})
    close = difflib.get_close_matches(written, known, n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def _check_silent(
    reader: Reader, name: str, written: str, value: str | None, line: int | None
) -> None:
    """A :data:`_SILENT` option, read as Slurm's sbatch reads it: nothing to do, but a value
    it refuses is an error (``--version=1``, ``--get-user-env=junk``)."""
    if name == "version" and value is not None:
        raise reader.error("takes no value", line, written)
    if name == "get-user-env" and value is not None and not _USER_ENV_VALUE.fullmatch(value):
        raise reader.error(
            f"invalid value {value!r}: give [TIMEOUT][MODE], a timeout in seconds and a mode, "
            "S or L (e.g. --get-user-env=L, --get-user-env=10L)",
            line,
            written,
        )


def scan(script: str, reader: Reader) -> None:
    """Read the directives of ``script``'s header into ``reader`` (a script that is no
    batch script is refused, located)."""
    if not script.strip():
        raise reader.error("the batch script is empty", 1)
    if "\0" in script:
        raise reader.error("the batch script contains NUL bytes (is it a binary file?)", None)
    if "\r" in script:
        bad = script[: script.index("\r")].count("\n") + 1
        raise reader.error("DOS line breaks (\\r\\n): convert the script with dos2unix", bad)
    if not script.startswith("#!"):
        raise reader.error(
            "the first line must start with #! and the interpreter (e.g. #!/bin/bash), as for "
            "sbatch",
            1,
        )
    in_header = True
    current = reader
    for number, line in enumerate(script.split("\n")[1:], start=2):
        if line.startswith("#SBATCH") and (len(line) == 7 or line[7].isspace()):
            if not in_header:
                reader.warnings.append(
                    f"{reader.where(number)}: #SBATCH after the first command is ignored "
                    "(as by sbatch)"
                )
                continue
            try:
                tokens = shlex.split(line[7:], comments=True)
            except ValueError as exc:
                raise reader.error(f"cannot read the directive: {exc}", number) from None
            if len(tokens) == 1 and tokens[0] in HETJOB_WORDS:
                current = reader.add_component(number)  # (a heterogeneous job's next one)
                continue
            current.read(tokens, number)
        elif line.strip() and not line.lstrip().startswith("#"):
            in_header = False


def command_flags(script: str) -> frozenset[str]:
    """The options for the submitting command (:data:`COMMAND_FLAGS`) that a batch script's
    ``#SBATCH`` lines give; none for text that is not a batch script (YAML, a broken
    script: its parser reports what is wrong)."""
    reader = Reader("<script>")
    try:
        scan(script, reader)
    except SubmitError:
        return frozenset()
    given = {name for r in (reader, *reader.components) for name in r.options}
    return COMMAND_FLAGS & given


def split_components(tokens: Sequence[str]) -> list[list[str]]:
    """sbatch's command-line options split at each ``:`` word into a heterogeneous job's
    components (one list without one). A ``:`` that is the value of an option written
    without ``=`` (``-J :``) is that value, not a separator."""
    parts: list[list[str]] = [[]]
    value_next = False
    for token in tokens:
        if token == ":" and not value_next:
            parts.append([])
            continue
        parts[-1].append(token)
        value_next = not value_next and _takes_next(token)
    return parts


def _takes_next(token: str) -> bool:
    """Whether ``token`` is an option whose value is the next word (``-J NAME``)."""
    if token.startswith("--"):
        name = "" if "=" in token else token[2:]
    elif token.startswith("-") and len(token) == 2:
        name = SHORT_OPTIONS.get(token[1], "")
    else:
        return False
    return name in VALUE_OPTIONS and name not in FLAG_OPTIONS | COMMAND_FLAGS


def digits(text: str) -> bool:
    """``text`` is a whole number in ASCII digits (``str.isdigit`` takes "²" too, which
    ``int`` refuses)."""
    return text.isascii() and text.isdigit()
