"""The submitting shell's environment, which a batch job inherits as with Slurm's default
``--export=ALL`` (sbatch, run, salloc): what is carried, what is not, and how large it may be.

The clients (``fusesched sbatch``, its quick path and native front, ``run``, ``salloc``)
send their whole environment; :func:`carried_env` keeps what a job should inherit. Not
carried: variables that describe the submitting session or this job's own ids and would be
wrong, stale or secret in the job — Slurm's and fusesched's own (the job gets its own, and
``FUSESCHED_TOKEN`` is a secret), an enclosing MPI launch's, the GPUs the submitting shell
was given, its home, user, working folders and temporary folder (the agent sets the task's),
the desktop session's. ``--export=NAME=value`` still sets any of them (docs/SUBMIT.md).
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

#: Not carried, by name.
NOT_CARRIED: Final = frozenset(
    {
        "HOME",
        "USER",
        "LOGNAME",
        "MAIL",
        "PWD",
        "OLDPWD",
        "SHLVL",
        "_",
        "TMPDIR",
        "CUDA_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "GPU_DEVICE_ORDINAL",
        "DBUS_SESSION_BUS_ADDRESS",
        "SBATCH_EXPORT",
        # a rank of an enclosing torchrun (its job's; a bare torchrun in the job reads them)
        "RANK",
        "LOCAL_RANK",
        "GROUP_RANK",
        "ROLE_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_WORLD_SIZE",
        "ROLE_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
    }
)
#: Not carried, by the start of the name.
NOT_CARRIED_PREFIXES: Final = (
    "SLURM_",
    "SLURMD_",
    "FUSESCHED_",
    "OMPI_",
    "PMIX_",
    "PMI_",
    "PRTE_",
    "HYDRA_",
    "PET_",
    "TORCHELASTIC_",
    "XDG_",
)
#: The most a carried environment may hold, names and values together (bytes of UTF-8).
MAX_ENV_BYTES: Final = 1 << 20
#: The most variables it may hold.
MAX_ENV_VARIABLES: Final = 10_000
#: The most one variable may hold, ``NAME=value`` (bytes): Linux starts no program with a
#: longer one (MAX_ARG_STRLEN, 32 pages, with its NUL).
MAX_VARIABLE_BYTES: Final = 131_071


def carried(name: str) -> bool:
    """Whether a variable called ``name`` is carried from the submitting shell to the job."""
    return name not in NOT_CARRIED and not name.startswith(NOT_CARRIED_PREFIXES)


def carried_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The part of the submitting environment ``environ`` the job inherits, sorted by name."""
    return {name: environ[name] for name in sorted(environ) if carried(name)}


def env_problem(environ: Mapping[str, str]) -> str | None:
    """Why ``environ`` cannot be a submitting environment (None: it can): a name that is
    empty or holds ``=`` or NUL, a value that holds NUL, a name or value that is no UTF-8
    text (a lone surrogate, which JSON's ``\\udc80`` escape gives: no launch holding it
    could be sent to a node), too many variables or bytes."""
    if len(environ) > MAX_ENV_VARIABLES:
        return (
            f"the submitting environment has {len(environ)} variables: at most "
            f"{MAX_ENV_VARIABLES} (use --export=NONE,NAME=value to send only some)"
        )
    size = 0
    for name, value in environ.items():
        if not name or "=" in name or "\0" in name:
            return f"invalid environment variable name {name!r}"
        if "\0" in value:
            return f"environment variable {name}: a value cannot hold a NUL character"
        try:
            one = len(name.encode("utf-8")) + len(value.encode("utf-8")) + 1
        except UnicodeEncodeError:
            return f"environment variable {name!r}: not UTF-8 text (a lone surrogate)"
        if one > MAX_VARIABLE_BYTES:
            return (
                f"environment variable {name} is {one} bytes: at most {MAX_VARIABLE_BYTES} "
                "(no program can be started with a longer one)"
            )
        size += one + 1
    if size > MAX_ENV_BYTES:
        return (
            f"the submitting environment is {size} bytes: at most {MAX_ENV_BYTES} (unset large "
            "variables, or use --export=NONE,NAME=value to send only some)"
        )
    return None


def checked_env(environ: dict[str, str] | None) -> dict[str, str] | None:
    """``environ`` as it is (None too), or ``ValueError`` with :func:`env_problem`'s reason:
    the check of a request's ``submit_env`` (pydantic reports a ``ValueError`` as a 422)."""
    if environ is not None and (problem := env_problem(environ)) is not None:
        raise ValueError(problem)
    return environ


def text_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` (``os.environ``) without what cannot travel as text: names or values
    that are not UTF-8 (Python holds their bytes as lone surrogates), and empty names;
    sorted by name. What the clients send (the native front sends the same)."""
    kept: dict[str, str] = {}
    for name in sorted(environ):
        value = environ[name]
        try:
            name.encode("utf-8")
            value.encode("utf-8")
        except UnicodeError:
            continue
        if name:
            kept[name] = value
    return kept
