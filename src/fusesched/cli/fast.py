"""``fusesched submit`` and ``fusesched sbatch`` in a few tens of milliseconds.

A scripted loop of submissions starts one process per job, so these two commands avoid the
command framework and the submission models: they read the files, send their text to the
controller's ``/v1/submissions`` (which parses and validates them, with the same messages) and
print the ids. Standard library only, through :mod:`fusesched.sdk`. Output and exit codes are
those of the full commands (``--help`` goes to the full command).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from fusesched.sdk import Client, ControllerError

OWN_OPTIONS = ("--controller", "--token", "--ca")


class UsageError(Exception):
    pass


def _split(argv: Sequence[str]) -> tuple[dict[str, str], bool, list[str]]:
    """(our options, --json, the rest): our options may come anywhere, as ``--x V`` or ``--x=V``."""
    own: dict[str, str] = {}
    as_json = False
    rest: list[str] = []
    args = list(argv)
    while args:
        arg = args.pop(0)
        name, eq, value = arg.partition("=")
        if arg == "--json":
            as_json = True
        elif name in OWN_OPTIONS:
            if not eq:
                if not args:
                    raise UsageError(f"{name} needs a value")
                value = args.pop(0)
            own[name] = value
        else:
            rest.append(arg)
    return own, as_json, rest


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read the file: {exc}") from None


def _files(command: str, rest: list[str]) -> list[dict[str, object]]:
    if command == "submit":
        if not rest:
            raise UsageError("no job file given (usage: fusesched submit FILE...)")
        unknown = [a for a in rest if a.startswith("-")]
        if unknown:
            raise UsageError(f"unknown option {unknown[0]} (see fusesched submit --help)")
        return [{"name": p, "text": _read(Path(p))} for p in rest]
    for k, arg in enumerate(rest):  # sbatch [OPTIONS] SCRIPT: the first existing file
        if not arg.startswith("-") and Path(arg).is_file():
            if rest[k + 1 :]:
                raise UsageError(
                    f"arguments after the script are not supported: {' '.join(rest[k + 1 :])}"
                )
            path = Path(arg)
            return [{"name": path.name, "text": _read(path), "args": rest[:k]}]
    raise UsageError("no batch script given (usage: fusesched sbatch [OPTIONS] SCRIPT)")


def run(command: str, argv: Sequence[str]) -> int:
    try:
        own, as_json, rest = _split(argv)
        files = _files(command, rest)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    client = Client(own.get("--controller"), token=own.get("--token"), ca=own.get("--ca"))
    try:
        answer = client.submit_files(files)
    except ControllerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if 400 <= exc.status < 500 else 1
    for warning in answer.get("warnings", []):
        print(f"warning: {warning}", file=sys.stderr)
    ids = [str(i) for i in answer["ids"]]
    if command == "sbatch":
        print(json.dumps({"id": ids[0]}) if as_json else f"Submitted batch job {ids[0]}")
    elif as_json:
        print(json.dumps({"id": ids[0], "ids": ids} if len(ids) == 1 else {"ids": ids}))
    else:
        for job_id in ids:
            print(f"Submitted job {job_id}")
    return 0
