"""What the submitting shell's environment means to ``sbatch``: the job inherits it
(``--export``, Slurm's default ``ALL``; what is carried: :mod:`fusesched.model.submit_env`),
and Slurm's *input environment variables* (``SBATCH_PARTITION``, ``SBATCH_TIMELIMIT``, …)
stand for options. As Slurm's order: the command line wins over them, they over the script's
``#SBATCH`` lines. Pure: the environment is given, never read here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from fusesched.model.submit_env import carried_env, env_problem
from fusesched.submit.errors import SubmitError
from fusesched.submit.sbatch_options import Export, export_env
from fusesched.submit.sbatch_reader import COMMAND_LINE, Reader

#: Slurm's input environment variables for sbatch that fusesched honours, with the option each
#: stands for (``SBATCH_EXPORT``: :func:`apply_export`).
INPUT_VARIABLES: Final = {
    "SBATCH_ACCOUNT": "--account",
    "SBATCH_ARRAY_INX": "--array",
    "SBATCH_CONSTRAINT": "--constraint",
    "SBATCH_CPUS_PER_GPU": "--cpus-per-gpu",
    "SBATCH_EXCLUSIVE": "--exclusive",
    "SBATCH_GPUS": "--gpus",
    "SBATCH_GPUS_PER_NODE": "--gpus-per-node",
    "SBATCH_GPUS_PER_TASK": "--gpus-per-task",
    "SBATCH_GRES": "--gres",
    "SBATCH_JOB_NAME": "--job-name",
    "SBATCH_MEM_PER_CPU": "--mem-per-cpu",
    "SBATCH_MEM_PER_GPU": "--mem-per-gpu",
    "SBATCH_MEM_PER_NODE": "--mem",
    "SBATCH_NO_REQUEUE": "--no-requeue",
    "SBATCH_OPEN_MODE": "--open-mode",
    "SBATCH_PARTITION": "--partition",
    "SBATCH_QOS": "--qos",
    "SBATCH_REQUEUE": "--requeue",
    "SBATCH_RESERVATION": "--reservation",
    "SBATCH_SIGNAL": "--signal",
    "SBATCH_TIMELIMIT": "--time",
}
#: Those that stand for a flag: set (to anything), the flag is given.
_FLAGS: Final = frozenset({"SBATCH_NO_REQUEUE", "SBATCH_REQUEUE"})


def input_options(submit_env: Mapping[str, str] | None) -> list[str]:
    """The options the submitting environment's input variables stand for, to be read before
    the command line's (which win) and after the script's. An empty value gives nothing
    (``SBATCH_EXCLUSIVE``: the flag)."""
    if submit_env is None:
        return []
    options: list[str] = []
    for name, option in INPUT_VARIABLES.items():
        value = submit_env.get(name)
        if value is None:
            continue
        if name in _FLAGS or (name == "SBATCH_EXCLUSIVE" and not value.strip()):
            options.append(option)
        elif value.strip():
            options.append(f"{option}={value.strip()}")
    return options


def from_input_variable(
    error: SubmitError, args: Sequence[str], submit_env: Mapping[str, str] | None
) -> SubmitError:
    """``error``, said to come from the input variable that gave its option (read as the
    command line's: :func:`input_options`) where the command line ``args`` did not give it:
    ``SBATCH_TIMELIMIT (in the environment): --time: cannot read time 'soon' …``."""
    if error.source != COMMAND_LINE or not submit_env:
        return error
    for name, option in INPUT_VARIABLES.items():
        given = any(a == option or a.startswith(f"{option}=") for a in args)
        if option == error.field and name in submit_env and not given:
            where = f"{name} (in the environment)"
            return SubmitError(error.message, source=where, field=error.field)
    return error


def apply_export(
    reader: Reader,
    data: dict[str, object],
    submit_env: Mapping[str, str] | None,
    *,
    input_variables: bool = True,
) -> str | None:
    """``--export`` into ``data``: the variables it names (the first group's ``env``) and the
    submitting environment the job inherits (``submit_env``: ``ALL``, the default). The
    command line's ``--export``, else ``SBATCH_EXPORT`` in the submitting environment (with
    ``input_variables``), else the script's (Slurm's order). Returns the one in effect, as
    given (None: none was: ``ALL``)."""
    option = reader.options.get("export")
    from_env = submit_env.get("SBATCH_EXPORT") if submit_env and input_variables else None
    if from_env is not None and (option is None or option.line is not None):
        try:
            export = export_env(from_env, submit_env)
        except ValueError as exc:
            raise SubmitError(
                f"SBATCH_EXPORT (in the environment): {exc}", source=COMMAND_LINE
            ) from None
        where, given = "SBATCH_EXPORT", from_env
    elif option is not None:
        given = reader.value("export") or ""
        try:
            export = export_env(given, submit_env)
        except ValueError as exc:
            raise reader.fail("export", str(exc)) from None
        where = reader.where(option.line)
    else:
        export, where, given = Export(carry_all=True, env={}), "", None
    if export.env:
        groups = data["groups"]
        assert isinstance(groups, list)
        groups[0]["env"] = export.env
    reader.warnings.extend(f"{where}: {message}" for message in export.warnings)
    if export.carry_all and submit_env is not None:
        problem = env_problem(submit_env)
        if problem is not None:
            raise SubmitError(problem, source=COMMAND_LINE, field="export")
        data["submit_env"] = carried_env(submit_env)
    return given
