"""``fusesched submit`` and ``fusesched sbatch`` in a few tens of milliseconds.

A scripted loop of submissions starts one process per job, so these two commands avoid the
command framework and the submission models: they read the files, send their text to the
controller's ``/v1/submissions`` (which parses and validates them, with the same messages) and
print the ids. Output and exit codes are those of the full commands (``--help`` goes to the
full command, and so does sbatch's ``-V``/``--version``, which reads no script).

sbatch's script is found as Slurm's sbatch finds it (:func:`sbatch_words`); with none named
it is read from standard input (:func:`script_text`, once: the full command reads the same
text when it takes over). A script with arguments goes to the full command, whose request
carries them (``script_args``).

Each file says the folder the command runs in (``submit_dir``: a batch script's working
directory, as Slurm's sbatch) and this host's name (``submit_host``: ``SLURM_SUBMIT_HOST``).
A controller older than such a field refuses it (422 naming it): the files are sent again
without it, with a warning where it matters (:func:`refused_fields`). The
request also carries the submitting environment (``submit_env``), which batch jobs inherit
as with Slurm's default ``--export=ALL``; a controller older than it refuses it in the same
way and gets the request again without it.

With one plain ``http://`` controller (the common case) the request is one POST on a socket
of its own (:func:`post_once`), so that not even :mod:`http.client` (and the e-mail parser it
imports) is loaded: about half of such a process's time went to imports. TLS (``https://``,
``--ca``) and several controllers (fail-over) go through :class:`fusesched.sdk.Client`.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from fusesched.client_base import (
    ControllerError,
    default_token,
    default_url,
    older_than,
    refusal,
    split_urls,
)
from fusesched.model.submit_env import text_environ
from fusesched.model.submit_host import this_host
from fusesched.submit.sbatch_words import (
    STDIN_SOURCE,
    SbatchWords,
    SbatchWordsError,
    asks_version,
    command_words,
    option_places,
    split_sbatch_words,
)

#: How long the quick path waits for the controller (the SDK's default).
TIMEOUT_S = 30.0

OWN_OPTIONS = ("--controller", "--token", "--ca")

#: The warning when the controller is older than ``submit_dir``.
OLDER_CONTROLLER = (
    "the controller is older than this command: batch jobs start in their task folder, not "
    "in this one, and their relative output files (-o/-e, slurm-%j.out) are not written"
)
#: The warning when the controller is older than ``submit_env``.
OLDER_ENV = (
    "the controller is older than this command: batch jobs do not inherit this shell's "
    "environment (name the variables they need: --export=NAME=value)"
)
#: The request's fields a controller older than them refuses (422 naming them), each with
#: the warning said when it was refused and the request sent again without it (None: none;
#: such a controller would not tell the jobs' tasks what it says anyway: SLURM_SUBMIT_HOST,
#: SLURM_NTASKS_PER_NODE…).
NEWER_FIELDS: dict[str, str | None] = {
    "submit_dir": OLDER_CONTROLLER,
    "submit_env": OLDER_ENV,
    "submit_host": None,
    "slurm_options": None,
}

#: The request's fields a controller older than them refuses that cannot be left out (the job
#: would not do what was asked), each with why the submission is refused then.
NEEDED_FIELDS: dict[str, str] = {
    "script_args": "the controller is older than this command: it cannot pass arguments to "
    "a batch script (upgrade it, or give the script none: e.g. --export=NAME=value)",
}

#: Said after a script that cannot be read.
SBATCH_USAGE = " (usage: fusesched sbatch [OPTIONS] SCRIPT [ARGS...])"

#: Print only the ids (``jid=$(sbatch --parsable job.sh)``), as the full command does.
PARSABLE = "--parsable"


class UsageError(Exception):
    pass


class HandOver(Exception):
    """The full command must do this one (a script's ``#SBATCH --wait``, ``--parsable``)."""


def _asks_the_command(text: str) -> bool:
    """Whether a script's ``#SBATCH`` lines may give ``--wait``, ``-W`` or ``--parsable``,
    which the full command honours (cli/submission.py); a false alarm costs only speed."""
    return any(
        line.startswith("#SBATCH") and ("--wait" in line or "--parsable" in line or "-W" in line)
        for line in text.split("\n")
    )


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


def submit_dir() -> str | None:
    """The folder this command runs in, the jobs' ``submit_dir`` (None: it cannot be told,
    e.g. it was removed, or its name is not UTF-8 text)."""
    try:
        folder = os.getcwd()
        folder.encode("utf-8")
    except (OSError, UnicodeError):
        return None
    return folder


def refused_fields(exc: ControllerError) -> list[str]:
    """The fields of :data:`NEWER_FIELDS` that ``exc`` refuses, a controller older than them
    (it refuses fields it does not know, ``submit_env: Extra inputs are not permitted``:
    nothing was submitted); empty for any other error — a controller that knows the field
    and refuses its value (an environment too large) says why, and that is the error."""
    return [name for name in NEWER_FIELDS if older_than(exc, name)]


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read the file: {exc}") from None
    if _asks_the_command(text):
        raise HandOver
    return text


def _files(command: str, rest: list[str]) -> list[dict[str, object]]:
    files = _named_files(command, rest)
    folder, host = submit_dir(), this_host()
    for item in files:
        if folder is not None:
            item["submit_dir"] = folder
        if host is not None:  # (SLURM_SUBMIT_HOST)
            item["submit_host"] = host
    return files


def _named_files(command: str, rest: list[str]) -> list[dict[str, object]]:
    if command == "submit":
        if not rest:
            raise UsageError("no job file given (usage: fusesched submit FILE...)")
        unknown = [a for a in rest if a.startswith("-")]
        if unknown:
            raise UsageError(f"unknown option {unknown[0]} (see fusesched submit --help)")
        return [{"name": p, "text": _read(p)} for p in rest]
    words = sbatch_words(rest)  # (no script arguments: run hands those over)
    places = option_places(words.options)  # (-J --parsable names the job "--parsable")
    options = [w for w, p in zip(words.options, places, strict=True) if not p or w != PARSABLE]
    if words.wraps:
        # sbatch [OPTIONS] --wrap=COMMAND: no script file; the controller's parser makes the
        # script of the command
        return [{"name": "wrap", "text": "", "args": options}]
    text = script_text(words.script)  # (sbatch [OPTIONS] < SCRIPT: standard input)
    if _asks_the_command(text):
        raise HandOver
    name = STDIN_SOURCE if words.script is None else os.path.basename(words.script)
    return [{"name": name, "text": text, "args": options}]


def _sbatch_line(argv: Sequence[str]) -> tuple[dict[str, str], bool, list[str], bool]:
    """sbatch's (our options, --json, the rest: Slurm's options, then ``--`` and the script
    if one is named, --parsable), each word read by where it stands (:func:`~fusesched.
    submit.sbatch_words.command_words`: ``-J --json`` names the job ``--json``; a script
    named ``--json`` is the script). :class:`HandOver` for what only the full command does:
    the script's arguments, ``-V``, ``--parsable`` with ``--json``."""
    words = sbatch_words(argv)
    if words.script_args:  # (the full command sends them; our options there too)
        raise HandOver
    if asks_version(words.options):  # (-V: the full command prints it, reads nothing)
        raise HandOver
    ours, slurm = command_words(words.options)
    own, as_json, _ = _split(ours)
    parsable = PARSABLE in _at_option(slurm)
    if parsable and as_json:
        raise HandOver  # (the full command says what is wrong)
    return own, as_json, [*slurm, *([] if words.script is None else ["--", words.script])], parsable


def _at_option(options: Sequence[str]) -> list[str]:
    """The words of sbatch's ``options`` that stand where an option does (not a value)."""
    return [w for w, place in zip(options, option_places(options), strict=True) if place]


def sbatch_words(args: Sequence[str]) -> SbatchWords:
    """sbatch's options, script and the script's arguments (:func:`~fusesched.submit.
    sbatch_words.split_sbatch_words`); :class:`UsageError` for a line that cannot be read."""
    try:
        return split_sbatch_words(args)
    except SbatchWordsError as exc:
        raise UsageError(str(exc)) from None


#: The batch scripts read from a stream so far, by path (None: standard input), each read
#: once: a pipe (``sbatch < job.sh``, ``/dev/stdin``) cannot be read again when the full
#: command takes over (:class:`HandOver`), so it reads what the quick path read.
_SCRIPTS: dict[str | None, str] = {}


def script_text(path: str | None) -> str:
    """The text of sbatch's script: the file at ``path`` (a pipe or a device such as
    ``/dev/stdin`` is read to its end), or with None standard input, when it is no terminal
    (as Slurm's sbatch reads a script not named). :class:`UsageError` when there is none."""
    if path is not None and os.path.isfile(path):  # (read again: it may have changed)
        return _read_script(path)
    if path not in _SCRIPTS:
        _SCRIPTS[path] = _read_stdin() if path is None else _read_script(path)
    return _SCRIPTS[path]


def _read_script(path: str) -> str:
    if os.path.isdir(path):
        raise UsageError(f"{path}: a folder, not a batch script{SBATCH_USAGE}")
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file{SBATCH_USAGE}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read the file: {exc}") from None


def _read_stdin() -> str:
    stream = sys.stdin
    none_given = (
        "no batch script given (usage: fusesched sbatch [OPTIONS] SCRIPT, fusesched sbatch "
        '[OPTIONS] < SCRIPT, or fusesched sbatch [OPTIONS] --wrap="COMMAND")'
    )
    try:
        if stream is None or stream.isatty():
            raise UsageError(none_given)
        data = stream.buffer.read()
    except (OSError, ValueError) as exc:  # (closed, or not readable)
        raise UsageError(f"{none_given}: cannot read standard input: {exc}") from None
    if not data:
        raise UsageError(f"{none_given}; standard input is empty")
    try:  # (universal newlines, as a file's)
        return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as exc:
        raise UsageError(f"standard input: cannot read the batch script: {exc}") from None


def run(command: str, argv: Sequence[str]) -> int | None:
    """The command's exit status; None when the full command must do it (:class:`HandOver`)."""
    try:
        if command == "sbatch":
            own, as_json, rest, parsable = _sbatch_line(argv)
        else:
            parsable = PARSABLE in argv
            if parsable and "--json" in argv:
                return None  # (the full command says what is wrong)
            own, as_json, rest = _split([arg for arg in argv if arg != PARSABLE])
        files = _files(command, rest)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except HandOver:
        return None
    environ: dict[str, str] | None = text_environ(os.environ)
    try:
        try:
            answer = submit_files(files, own, environ)
        except ControllerError as exc:
            refused = refused_fields(exc)
            if not refused:
                raise
            for name in refused:
                if NEWER_FIELDS[name] is not None:
                    print(f"warning: {NEWER_FIELDS[name]}", file=sys.stderr)
                for item in files:
                    item.pop(name, None)
            if "submit_env" in refused:
                environ = None
            answer = submit_files(files, own, environ)
    except ControllerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if 400 <= exc.status < 500 else 1
    for warning in answer.get("warnings", []):
        print(f"warning: {warning}", file=sys.stderr)
    ids = [str(i) for i in answer["ids"]]
    if parsable:  # (the ids alone, one a line: cli/submission.print_ids)
        print("\n".join(ids[:1] if command == "sbatch" else ids))
    elif command == "sbatch":
        print(json.dumps({"id": ids[0]}) if as_json else f"Submitted batch job {ids[0]}")
    elif as_json:
        print(json.dumps({"id": ids[0], "ids": ids} if len(ids) == 1 else {"ids": ids}))
    else:
        for job_id in ids:
            print(f"Submitted job {job_id}")
    return 0


def submit_files(
    files: list[dict[str, object]],
    own: Mapping[str, str],
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``Client.submit_files`` — on a socket of its own when that is enough (module doc) —
    with ``environ``, the submitting environment (None: not sent). Every failure is a
    :class:`ControllerError` with a readable message."""
    urls = split_urls(own.get("--controller") or default_url())
    ca = own.get("--ca") or os.environ.get("FUSESCHED_CA")
    where = urls[0] if urls else "the controller"
    if len(urls) != 1 or not urls[0].startswith("http://") or ca:
        from fusesched.sdk import Client

        try:
            client = Client(urls, token=own.get("--token"), ca=ca)
            answer = client.submit_files(files, submit_env=environ)
        except ControllerError:
            raise
        except (OSError, ValueError) as exc:  # an unreadable CA file, a garbled answer
            raise ControllerError(0, f"cannot submit to {where}: {exc}") from None
        return _checked(answer, where)
    token = own.get("--token") or default_token()
    body: dict[str, object] = {"files": files}
    if environ is not None:
        body["submit_env"] = environ
    if not token:
        body["user"] = _user_name()
    status, payload = post_once(urls[0], "/v1/submissions", json.dumps(body).encode(), token)
    if status >= 400:
        raise ControllerError(status, refusal(payload, status))
    try:
        decoded: object = json.loads(payload)
    except ValueError:
        decoded = None
    return _checked(decoded, where)


def _checked(answer: object, where: str) -> dict[str, Any]:
    """A submission's answer, if it is one (ids: a non-empty list)."""
    if isinstance(answer, dict):
        ids = answer.get("ids")
        if isinstance(ids, list) and ids:
            return answer
    raise ControllerError(0, f"{where} did not answer as a fusesched controller")


def _user_name() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a uid with no account and no USER/LOGNAME
        raise ControllerError(
            0,
            f"cannot tell who is submitting (uid {os.getuid()} has no user name): set USER "
            "or use a token (FUSESCHED_TOKEN)",
        ) from None


def post_once(url: str, path: str, body: bytes, token: str | None) -> tuple[int, bytes]:
    """POST ``body`` (JSON) to ``url`` + ``path`` on a connection of its own, closed after the
    answer; (status, body). :class:`ControllerError` (status 0) when the controller cannot be
    reached, or is lost during the request (which may then have been carried out)."""
    where, _, base = url[len("http://") :].partition("/")
    host, port = _host_port(where, url)
    if token is not None and (not token.isprintable() or not token.isascii()):
        raise ControllerError(0, "the token has characters a token cannot have")
    try:
        sock = socket.create_connection((host, port), timeout=TIMEOUT_S)
    except (OSError, UnicodeError) as exc:
        raise ControllerError(0, f"cannot reach the controller at {url}: {exc}") from None
    head = [
        f"POST {'/' + base if base else ''}{path} HTTP/1.1",
        f"Host: {where}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        "Connection: close",
    ]
    if token:
        head.append(f"Authorization: Bearer {token}")
    try:
        with sock:
            sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
                whole = _complete(data)  # (a server may keep the connection open)
                if whole is not None:
                    return whole
        return _response(data)
    except (OSError, ValueError) as exc:
        raise ControllerError(
            0,
            f"lost the controller at {url} during the request ({exc}); it may or may not "
            "have been carried out",
        ) from None


def _host_port(where: str, url: str) -> tuple[str, int]:
    host, port = where, "80"
    if where.startswith("["):  # [IPv6]:port
        host, bracket, rest = where[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else "80" if bracket and not rest else ""
    elif ":" in where:
        host, port = where.rsplit(":", 1)
    if not host or not (port.isascii() and port.isdigit()):
        raise ControllerError(0, f"not a controller URL: {url!r} (http://HOST:PORT)")
    return host, int(port)


def _complete(raw: bytes) -> tuple[int, bytes] | None:
    """The response, if ``raw`` already holds all of it (by Content-Length or the last
    chunk); None while more is to come (or when only the end of the stream tells)."""
    head, sep, _ = raw.partition(b"\r\n\r\n")
    if not sep:
        return None
    lower = head.lower()
    if b"\r\ncontent-length:" not in lower and b"\r\ntransfer-encoding:" not in lower:
        return None
    try:
        return _response(raw)
    except ValueError:
        return None


def _response(raw: bytes) -> tuple[int, bytes]:
    """(status, body) of a whole HTTP/1.1 response read to its end (``Connection: close``)."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    parts = lines[0].split(None, 2)
    if not sep or len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
        raise ValueError("not an HTTP response")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        body = _unchunk(body)
    elif b"content-length" in headers:
        length = int(headers[b"content-length"])
        if len(body) < length:
            raise ValueError("the answer ended early")
        body = body[:length]
    return int(parts[1]), body


def _unchunk(data: bytes) -> bytes:
    out: list[bytes] = []
    while True:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return b"".join(out)
        if len(data) < size:
            raise ValueError("the answer ended early")
        out.append(data[:size])
        data = data[size + 2 :]
