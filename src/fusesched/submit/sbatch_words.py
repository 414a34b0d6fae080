"""Where sbatch's script is on its command line, as Slurm's ``sbatch`` finds it: the first
word that is neither an option nor an option's value (:func:`split_sbatch_words`). What
follows the script is the script's own arguments (``$1 $2 …``), never sbatch's options.

Telling an option's value from the script needs to know which options take one, so this
module has Slurm's table of sbatch's options (:data:`SLURM_OPTIONS`, Slurm 22.05 and later),
including those fusesched warns about and ignores. An option outside it written without
``=`` and followed by a word is refused: that word could be its value or the script.

The quick path (:mod:`fusesched.cli.fast`) imports it at every start, so it imports nothing
beyond the standard library's core and makes no class with typing's machinery (a NamedTuple
cost milliseconds). The native front (``cli/front.c``) has the same table; a test keeps the
two equal.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

VALUE: Final = "value"  # takes a value: --name=VALUE, --name VALUE, -xVALUE, -x VALUE
OPTIONAL: Final = "optional"  # takes one only as --name=VALUE (or -xVALUE)
FLAG: Final = "flag"  # takes none

_VALUES: Final = """
    account acctg-freq array batch bb bbf begin chdir cluster cluster-constraint clusters
    comment constraint container core-spec cores-per-socket cpu-freq cpus-per-gpu
    cpus-per-task deadline delay-boot dependency distribution error exclude export
    export-file extra-node-info gid gpu-bind gpu-freq gpus gpus-per-node gpus-per-socket
    gpus-per-task gres gres-flags hint input job-name kill-on-invalid-dep licenses mail-type
    mail-user mcs-label mem mem-bind mem-per-cpu mem-per-gpu mincpus network nodefile
    nodelist nodes ntasks ntasks-per-core ntasks-per-gpu ntasks-per-node ntasks-per-socket
    ntasks-per-tres open-mode output partition power prefer priority profile qos reservation
    segment signal sockets-per-node switches tasks-per-node thread-spec threads-per-core time
    time-min tmp
    tres-per-task uid wait-all-nodes wckey wrap
"""
_OPTIONALS: Final = "exclusive get-user-env nice no-kill propagate"
_FLAGS: Final = """
    contiguous help hold ignore-pbs no-requeue overcommit oversubscribe parsable quiet reboot
    requeue spread-job test-only usage use-min-nodes verbose version wait
"""
#: Every long option of Slurm's sbatch and whether it takes a value (as its getopt table:
#: ``--nice`` takes one only written ``--nice=5``; ``--wrap`` always takes one).
SLURM_OPTIONS: Final[dict[str, str]] = {
    **{name: VALUE for name in _VALUES.split()},
    **{name: OPTIONAL for name in _OPTIONALS.split()},
    **{name: FLAG for name in _FLAGS.split()},
}
#: fusesched's own options of its sbatch command (the controller to send to, the answer as
#: JSON): options before the script, as Slurm's; after it, the script's arguments.
COMMAND_OPTIONS: Final[dict[str, str]] = {
    "controller": VALUE,
    "token": VALUE,
    "ca": VALUE,
    "json": FLAG,
}
#: Slurm's one-letter options, by the long option each stands for.
SLURM_SHORT: Final[dict[str, str]] = {
    "a": "array",
    "A": "account",
    "b": "begin",
    "B": "extra-node-info",
    "c": "cpus-per-task",
    "C": "constraint",
    "d": "dependency",
    "D": "chdir",
    "e": "error",
    "F": "nodefile",
    "G": "gpus",
    "h": "help",
    "H": "hold",
    "i": "input",
    "J": "job-name",
    "k": "no-kill",
    "L": "licenses",
    "m": "distribution",
    "M": "clusters",
    "n": "ntasks",
    "N": "nodes",
    "o": "output",
    "O": "overcommit",
    "p": "partition",
    "q": "qos",
    "Q": "quiet",
    "s": "oversubscribe",
    "S": "core-spec",
    "t": "time",
    "v": "verbose",
    "V": "version",
    "w": "nodelist",
    "W": "wait",
    "x": "exclude",
}
#: The name a script read from standard input is submitted under (``sbatch < job.sh``), for
#: messages; its job's default name is Slurm's for it (:data:`DEFAULT_NAMES`).
STDIN_SOURCE: Final = "<stdin>"
#: A job's default name where its script's source does not give it (Slurm's: "sbatch" for
#: a script read from standard input; a named script's is its file name).
DEFAULT_NAMES: Final = {STDIN_SOURCE: "sbatch"}
#: The word that separates a heterogeneous job's components' options (``-n1 : -n2``).
HETJOB_SEPARATOR: Final = ":"


class SbatchWordsError(ValueError):
    """sbatch's command line cannot be read: its message says why (a usage error)."""


class SbatchWords:
    """sbatch's command line, split: its options (with their values and any ``:``
    separators), the script (None: none named) and the script's arguments."""

    __slots__ = ("options", "script", "script_args")

    def __init__(self, options: list[str], script: str | None, script_args: list[str]) -> None:
        self.options = options
        self.script = script
        self.script_args = script_args

    def __repr__(self) -> str:
        return f"SbatchWords({self.options!r}, {self.script!r}, {self.script_args!r})"

    @property
    def wraps(self) -> bool:
        """``--wrap`` is among the options: its command stands for the script."""
        return wraps(self.options)


def wraps(options: Sequence[str]) -> bool:
    """Whether sbatch's ``options`` have ``--wrap`` where an option stands (``-J --wrap=x``
    names the job ``--wrap=x``: :func:`option_places`)."""
    return any(
        place and (word == "--wrap" or word.startswith("--wrap="))
        for word, place in zip(options, option_places(options), strict=True)
    )


def split_sbatch_words(words: Sequence[str]) -> SbatchWords:
    """``sbatch [OPTIONS] [SCRIPT [ARGS…]]`` split as Slurm's sbatch splits it: options run
    to the first word that is none (nor an option's value), or to ``--``; that word is the
    script and every word after it the script's argument, options or not. A script (or a
    word after ``--``) with ``--wrap`` is refused, as Slurm refuses them; so is an option
    not in Slurm's table followed by a word (:func:`_value_follows`)."""
    options, after = list(words), []
    k = 0
    while k < len(words):
        word = words[k]
        if word == "--":
            options, after = list(words[:k]), list(words[k + 1 :])
            break
        if word != HETJOB_SEPARATOR and (not word.startswith("-") or word == "-"):
            options, after = list(words[:k]), list(words[k:])
            break
        k += 1 + _value_follows(word, words[k + 1] if k + 1 < len(words) else None)
    script, script_args = (after[0], after[1:]) if after else (None, [])
    if script is not None and wraps(options):
        raise SbatchWordsError(
            f"unexpected argument {script!r}: give a batch script or --wrap, not both "
            "(--wrap's command stands for the script, and takes no arguments)"
        )
    return SbatchWords(options, script, script_args)


def asks_version(options: Sequence[str]) -> bool:
    """Whether sbatch's ``options`` (the words before the script: :attr:`SbatchWords.options`)
    give ``-V``/``--version``, also among flags run together (``-HV``), but not as another
    option's value (``-J -V`` names the job ``-V``): Slurm's sbatch then prints its version
    and does nothing else: reads no script, submits nothing (``--version=X`` is no such
    request: Slurm's refuses it, as the job's parser does)."""
    k = 0
    while k < len(options):
        word = options[k]
        if word == "--version":
            return True
        if word.startswith("-") and not word.startswith("--"):
            for letter in word[1:]:  # (flags run together, up to one that takes a value)
                long_name = SLURM_SHORT.get(letter)
                if long_name == "version":
                    return True
                if long_name is None or SLURM_OPTIONS[long_name] != FLAG:
                    break
        try:
            k += 1 + _value_follows(word, options[k + 1] if k + 1 < len(options) else None)
        except SbatchWordsError:  # (an unknown option before a word: not the version)
            k += 1
    return False


def option_places(options: Sequence[str]) -> list[bool]:
    """For each of sbatch's words before the script (:attr:`SbatchWords.options`), whether
    it stands where an option stands (True) or is the value of the option before it (False:
    ``-J --json`` names the job ``--json``, as Slurm's getopt reads it). The command's own
    options (:data:`COMMAND_OPTIONS`) are known too: ``--controller URL`` takes the URL."""
    places: list[bool] = []
    k = 0
    while k < len(options):
        word, following = options[k], options[k + 1] if k + 1 < len(options) else None
        try:
            takes = word.startswith("-") and _value_follows(word, following)
        except SbatchWordsError:  # (an unknown option before a word: read as a flag)
            takes = False
        places.extend([True, False] if takes else [True])
        k += 1 + takes
    return places


def command_words(options: Sequence[str]) -> tuple[list[str], list[str]]:
    """sbatch's words before the script split into (the command's own options, with the
    value each takes: ``--json``, ``--controller URL``, ``--token=T``…; Slurm's options,
    their values and any ``:``), each by where it stands (:func:`option_places`): a word
    that is another option's value is that value, never one of ours."""
    places = option_places(options)
    own: list[str] = []
    slurm: list[str] = []
    k = 0
    while k < len(options):
        word = options[k]
        name, eq, _ = word[2:].partition("=") if word.startswith("--") else ("", "", "")
        kind = COMMAND_OPTIONS.get(name) if places[k] else None
        if kind is None or (eq and kind == FLAG):  # (--json=1: no option of ours)
            slurm.append(word)
            k += 1
            continue
        taken = 1 + (k + 1 < len(options) and not places[k + 1])
        own.extend(options[k : k + taken])
        k += taken
    return own, slurm


def _value_follows(word: str, following: str | None) -> bool:
    """Whether the option ``word`` takes the next word as its value (``-J NAME``,
    ``--job-name NAME``, ``-HJ NAME``); an unknown one followed by a word is refused."""
    if word == HETJOB_SEPARATOR:
        return False
    if word.startswith("--"):
        name, eq, _ = word[2:].partition("=")
        kind = SLURM_OPTIONS.get(name) or COMMAND_OPTIONS.get(name)
        if eq or kind is not None:
            return not eq and kind == VALUE and following is not None
        return _unknown(word, following)
    for at, letter in enumerate(word[1:], start=1):  # (-HvJ NAME: flags, then one value)
        long_name = SLURM_SHORT.get(letter)
        if long_name is None:
            return _unknown(f"-{letter}", following)
        kind = SLURM_OPTIONS[long_name]
        if kind != FLAG:  # (the rest of the word is its value, else the next word)
            return kind == VALUE and at == len(word) - 1 and following is not None
    return False


def _unknown(option: str, following: str | None) -> bool:
    """An option not in Slurm's table: a flag when nothing but options follow it (its
    parser warns and ignores it); refused before a word it may or may not take."""
    if following is None or following.startswith("-") or following == HETJOB_SEPARATOR:
        return False
    raise SbatchWordsError(
        f"unknown sbatch option {option}: cannot tell whether {following!r} is its value "
        f"or the batch script (write {option}{'=' if option[1] == '-' else ''}VALUE if it "
        "takes one, or leave it out)"
    )
