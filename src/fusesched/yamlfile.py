"""Reading a YAML configuration file, with the one set of errors every reader gives.

Every configuration file a user hands fusesched (tenancy, power saving, agent, federation,
twin scenario, power models) is read through :func:`read_yaml`, so a missing file, a binary
file and a YAML syntax error read the same whichever file it was::

    cannot read the power configuration power.yaml: No such file or directory
    cannot read the power configuration power.yaml: not UTF-8 text
    power.yaml:3: not valid YAML: mapping values are not allowed here

Each caller turns :class:`YamlFileError` into its own error type (the message stays).
"""

from __future__ import annotations

from os import PathLike
from pathlib import Path
from typing import Any

import yaml


class YamlFileError(ValueError):
    """A file that could not be read as YAML. ``str(error)`` is the whole message; ``path``,
    ``line`` (1-based, None when unknown) and ``reason`` are its parts."""

    def __init__(self, message: str, path: str, line: int | None, reason: str) -> None:
        super().__init__(message)
        self.path = path
        self.line = line
        self.reason = reason


def read_yaml(path: str | PathLike[str], what: str) -> Any:
    """The document in the YAML file at ``path`` (``None`` for an empty file).

    ``what`` names the file in messages ("tenancy configuration", "scenario"). Raises
    :class:`YamlFileError` when the file cannot be read, is not UTF-8 text or is not YAML.
    """
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise YamlFileError(f"cannot read the {what} {source}: {why}", source, None, why) from None
    except UnicodeDecodeError:  # a binary file
        why = "not UTF-8 text"
        raise YamlFileError(f"cannot read the {what} {source}: {why}", source, None, why) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = None if mark is None else int(mark.line) + 1
        problem = getattr(exc, "problem", None) or str(exc)
        reason = f"not valid YAML: {problem}"
        where = source if line is None else f"{source}:{line}"
        raise YamlFileError(f"{where}: {reason}", source, line, reason) from None
