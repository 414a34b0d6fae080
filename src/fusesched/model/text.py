"""Text the store can keep: no NUL character (``\\u0000``) anywhere; environment variable names.

PostgreSQL refuses NUL in its text and JSONB columns, so a submission or node registration
holding one would fail at insert (a 500, after earlier jobs of a batch were stored). The
request models refuse it instead, with :func:`refuse_nul` as a validator of every field.
"""

from __future__ import annotations

import re
from typing import Final, TypeVar

NUL: Final = "\x00"

#: A name a shell takes as a variable (the job's ``env``, ``--export``, srun's environment).
ENV_NAME_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)

T = TypeVar("T")


def nul_in(value: object) -> str | None:
    """Where ``value`` (a string, or lists, tuples and dicts of them, keys included) holds a
    NUL character: ``""`` for the string itself, ``"[2]"``, ``"['PATH']"`` or ``"the key
    'A\\x00'"`` inside it; ``None`` when nowhere. Other values (numbers, validated models) are
    not looked into."""
    if isinstance(value, str):
        return "" if NUL in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and NUL in key:
                return f"the key {key!r}"
            inner = nul_in(item)
            if inner is not None:
                return f"[{key!r}]{inner}"
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            inner = nul_in(item)
            if inner is not None:
                return f"[{index}]{inner}"
    return None


def refuse_nul(value: T) -> T:
    """``value`` unchanged, or ``ValueError`` saying where it holds a NUL character."""
    where = nul_in(value)
    if where is None:
        return value
    at = f" (in {where})" if where else ""
    raise ValueError(f"a NUL character (\\u0000) is not allowed{at}")


def is_env_name(text: str) -> bool:
    """``text`` is a whole shell variable name (ASCII letters, digits, ``_``; not a digit first)."""
    return ENV_NAME_RE.fullmatch(text) is not None
