"""Reads systemd unit and environment files far enough to start a unit's ``ExecStart=`` as
systemd would, so that tests/live/test_deploy_units.py runs the units of deploy/systemd/ rather
than a copy of their command lines: sections, continued lines, repeated keys, ``Environment=``
and ``EnvironmentFile=`` (a leading ``-``: the file may be missing; its settings override
``Environment=``'s), and the command line's quoting and variables (systemd.service(5),
"Command lines": ``${NAME}`` is replaced within a word, a word that is just ``$NAME`` becomes
the value split at whitespace, none for an empty value). A variable the environment does not
set is an error here (systemd would pass an empty string): a misspelt name must fail a test.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_BRACED = re.compile(r"\$\{(" + _NAME + r")\}")
_BARE_WORD = re.compile(r"\$(" + _NAME + r")")


@dataclass(frozen=True)
class Unit:
    """A unit file's settings: section → key → every value assigned, in order."""

    sections: dict[str, dict[str, list[str]]]

    def values(self, section: str, key: str) -> list[str]:
        return self.sections.get(section, {}).get(key, [])

    def value(self, section: str, key: str) -> str:
        """The setting's last value (for a single-valued setting the last assignment wins)."""
        values = self.values(section, key)
        if not values:
            raise KeyError(f"[{section}] {key}= is not set")
        return values[-1]


def parse_unit(text: str) -> Unit:
    """The settings of a unit file; an empty assignment (``Key=``) resets a list setting."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    pending = ""  # a line continued with a trailing backslash
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith(("#", ";")) or (not line and not pending):
            continue  # (comment lines inside a continued line are skipped too)
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, sep, value = line.partition("=")
        if current is None or not sep:
            raise ValueError(f"not a unit file line: {raw!r}")
        values = current.setdefault(key.strip(), [])
        if value.strip():
            values.append(value.strip())
        else:
            values.clear()
    return Unit(sections)


def parse_env_file(text: str) -> dict[str, str]:
    """The assignments of an environment file: ``NAME=value`` lines, comments, blank lines,
    a value's enclosing quotes removed."""
    env: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        key, sep, value = line.partition("=")
        if not sep or not re.fullmatch(_NAME, key.strip()):
            raise ValueError(f"not an environment file line: {raw!r}")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        env[key.strip()] = value
    return env


def service_environment(unit: Unit, root: Path) -> dict[str, str]:
    """The variables the unit's ``[Service]`` sets, its files read under ``root`` (which
    stands for ``/``)."""
    env: dict[str, str] = {}
    for value in unit.values("Service", "Environment"):
        for word in shlex.split(value):
            key, _, val = word.partition("=")
            env[key] = val
    for value in unit.values("Service", "EnvironmentFile"):
        optional = value.startswith("-")
        path = root / value.removeprefix("-").lstrip("/")
        if optional and not path.exists():
            continue
        env.update(parse_env_file(path.read_text()))
    return env


def referenced(command: str) -> set[str]:
    """The names of the variables a command line uses."""
    return set(_BRACED.findall(command)) | {
        word[1:] for word in shlex.split(command) if _BARE_WORD.fullmatch(word)
    }


def exec_argv(command: str, env: dict[str, str]) -> list[str]:
    """The argument vector of an ``ExecStart=`` line (no ``-``/``+``/``@`` prefixes: the
    units here use none) in the environment ``env``."""

    def lookup(name: str) -> str:
        if name not in env:
            raise KeyError(f"the command line uses ${name}, which the unit's environment lacks")
        return env[name]

    argv: list[str] = []
    for word in shlex.split(command):
        if _BARE_WORD.fullmatch(word):
            argv += lookup(word[1:]).split()
        else:
            argv.append(_BRACED.sub(lambda m: lookup(m[1]), word))
    return argv


def edit_env_file(text: str, changes: dict[str, str]) -> str:
    """``text`` with each named variable's line set to the new value, as an operator edits
    the shipped file; each must be there already (the file documents what there is to set)."""
    lines = text.splitlines()
    for key, value in changes.items():
        at = [i for i, line in enumerate(lines) if line.startswith(f"{key}=")]
        if len(at) != 1:
            raise KeyError(f"{key}= is not set once in the environment file")
        lines[at[0]] = f"{key}={value}"
    return "\n".join(lines) + "\n"
