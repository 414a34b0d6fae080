"""Batch scripts with ``#SBATCH`` directives, read as Slurm's ``sbatch`` reads them.

Directives are the ``#SBATCH`` lines before the first command (later ones are ignored, with a
warning, as Slurm ignores them); options given on the command line override them. The script
becomes one task group called ``main`` that runs the whole script text. Without a script,
``--wrap="command"`` stands for one: ``#!/bin/sh`` and the command (job name ``wrap``).

Tasks and nodes: ``replicas`` is ``--ntasks``, else ``--nodes`` × ``--ntasks-per-node``, else
``--nodes`` (one task per node), else 1. ``max_tasks_per_node`` is ``--ntasks-per-node``, else,
with several ``--nodes``, ceil(tasks / nodes) (1 with ``--nodes`` alone); ``--nodes=1`` with
several tasks keeps them on one host (``placement.topology`` required on the host name), and
several ``--nodes`` (one count, not a range) with more tasks than nodes run on exactly that
many (``placement.nodes``: every node with a task, as Slurm's block distribution spreads them).

Per-task resources (CPUs, memory, GPUs and other gres): :mod:`fusesched.submit.sbatch_resources`.
A GPU type becomes a node selector on ``fusesched.io/gpu-model``.

A heterogeneous job (``#SBATCH hetjob`` lines, ``:`` among the options) has one task group
per component: :mod:`fusesched.submit.sbatch_hetjob`.

See docs/SUBMIT.md for every option.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final, TypeVar

from fusesched.hostlist import expand_hostlist
from fusesched.model.job import LabelOp, QoS
from fusesched.model.licenses import LicenseError, parse_licenses
from fusesched.model.node import LABEL_GPU_MODEL, LABEL_HOSTNAME
from fusesched.model.resources import CPU, GPU, MEMORY
from fusesched.submit.begin import parse_begin
from fusesched.submit.errors import SubmitError, read_source
from fusesched.submit.job_notify import MailOptionError, mail_options
from fusesched.submit.job_signal import parse_signal_option, signal_warnings
from fusesched.submit.label_terms import LabelRequirementRequest
from fusesched.submit.request import (
    MAX_COMMENT,
    ParsedJob,
    comment_control,
    parse_request,
)
from fusesched.submit.sbatch_environment import apply_export, from_input_variable, input_options
from fusesched.submit.sbatch_hetjob import build_hetjob, check_job_wide, read_components
from fusesched.submit.sbatch_options import (
    deadline_time,
    explicit_priority,
    kill_on_invalid_dep,
    nice_priority,
    open_mode,
)
from fusesched.submit.sbatch_reader import (
    Reader,
    digits,
    scan,
    split_components,
)
from fusesched.submit.sbatch_reader import command_flags as command_flags  # (re-exported)
from fusesched.submit.sbatch_resources import task_accelerators, task_cpus, task_memory
from fusesched.submit.sbatch_slurm_options import slurm_options
from fusesched.submit.sbatch_words import DEFAULT_NAMES, wraps
from fusesched.submit.syntax import (
    parse_array,
    parse_dependencies,
    parse_slurm_time,
)

#: Label a Slurm node feature (``--constraint=ib``) is matched against: ``feature.fusesched.io/ib``.
FEATURE_LABEL_PREFIX: Final = "feature.fusesched.io/"
QOS_NAMES: Final = {
    "gold": QoS.GOLD,
    "high": QoS.GOLD,
    "silver": QoS.SILVER,
    "normal": QoS.SILVER,
    "bronze": QoS.BRONZE,
    "low": QoS.BRONZE,
}
_T = TypeVar("_T")


def load_sbatch(
    path: str | Path,
    args: Sequence[str] = (),
    now: float | None = None,
    submit_dir: str | None = None,
    submit_env: Mapping[str, str] | None = None,
) -> ParsedJob:
    """:func:`parse_sbatch` on a file (its name is the default job name)."""
    text, name = read_source(path, "the batch script")
    return parse_sbatch(
        text, source=name, args=args, now=now, submit_dir=submit_dir, submit_env=submit_env
    )


def parse_sbatch(
    script: str,
    *,
    source: str = "<script>",
    args: Sequence[str] = (),
    now: float | None = None,
    submit_dir: str | None = None,
    submit_env: Mapping[str, str] | None = None,
    input_variables: bool = True,
    script_args: Sequence[str] = (),
) -> ParsedJob:
    """:func:`_parse_sbatch`; an error in an option an input variable stands for
    (``SBATCH_TIMELIMIT=soon``) names the variable, not the command line."""
    try:
        return _parse_sbatch(
            script,
            source=source,
            args=args,
            now=now,
            submit_dir=submit_dir,
            submit_env=submit_env,
            input_variables=input_variables,
            script_args=script_args,
        )
    except SubmitError as exc:
        raise from_input_variable(exc, args, submit_env if input_variables else None) from None


def _parse_sbatch(
    script: str,
    *,
    source: str,
    args: Sequence[str],
    now: float | None,
    submit_dir: str | None,
    submit_env: Mapping[str, str] | None,
    input_variables: bool,
    script_args: Sequence[str],
) -> ParsedJob:
    """A job from a batch script and optional ``sbatch`` command-line options (``args``,
    e.g. ``["-N", "2", "--time=1:00:00"]``), which override the script's directives.

    ``submit_dir``: the folder sbatch runs in (the job's ``submit_dir``): the script starts
    there unless ``-D`` says otherwise, and relative ``-D``, ``-o`` and ``-e`` are relative
    to it, as with Slurm. None: not known (the job runs in its task's folder).

    ``submit_env``: the submitting shell's environment, which the job inherits unless
    ``--export`` (or ``SBATCH_EXPORT`` in it) says otherwise, as Slurm's default
    ``--export=ALL`` (what is carried: :mod:`fusesched.model.submit_env`). None: not known
    (nothing is carried; a bare ``--export=NAME`` is refused). With ``input_variables``
    (sbatch's, not run's), its ``SBATCH_PARTITION``, ``SBATCH_TIMELIMIT``, … stand for
    options (:mod:`fusesched.submit.sbatch_environment`).

    An empty ``script`` with ``--wrap=COMMAND`` in ``args`` is the job sbatch makes of that
    command; a script and ``--wrap`` together are an error. ``script_args``: the script's
    arguments (``$1 $2 …``; sbatch's command line gives none with ``--wrap``). ``--begin``
    is read against ``now`` (None: this machine's clock). Unknown options are returned as
    warnings; malformed scripts and values raise :class:`SubmitError` with the line (or
    "command line").
    """
    reader = Reader(source)
    parts = split_components(args)  # (a heterogeneous job's components, separated by ':')
    if input_variables:  # (before the command line's options, which win)
        parts[0] = [*input_options(submit_env), *parts[0]]
    reader.wrapping = any(wraps(p) for p in parts)  # (where an option stands: -J --wrap=x)
    if reader.wrapping and not script.strip():
        readers = read_components(reader, parts)
        if len(readers) > 1:  # (--wrap in a later component is refused)
            check_job_wide(readers)
        script = wrap_script(reader)
    else:
        scan(script, reader)
        readers = read_components(reader, parts)
        for component in readers:
            if "wrap" in component.options:
                raise component.fail("wrap", "give a batch script or --wrap, not both")
    data = _build(reader, script) if len(readers) == 1 else build_hetjob(readers, script, _build)
    if submit_dir is not None:
        data["submit_dir"] = submit_dir
    if script_args:  # (left out without: a controller older than the field refuses it)
        data["script_args"] = list(script_args)
    now = time.time() if now is None else now
    if reader.value("begin") is not None:
        try:
            data["begin_time"] = parse_begin(reader.value("begin") or "", now)
        except ValueError as exc:
            raise reader.fail("begin", str(exc)) from None
    if reader.value("deadline") is not None:
        limit = data.get("walltime_s")
        walltime = float(limit) if isinstance(limit, int | float) else None
        try:
            data["deadline"] = deadline_time(reader.value("deadline") or "", now, walltime)
        except ValueError as exc:
            raise reader.fail("deadline", str(exc)) from None
    if reader.value("reservation") is not None:  # (its form is checked with the request)
        data["reservation"] = reader.value("reservation")
    if reader.value("licenses") is not None:  # -L matlab:2,ansys (a bare name: one)
        try:
            data["licenses"] = dict(parse_licenses(reader.value("licenses") or "", default=1))
        except LicenseError as exc:
            raise reader.fail("licenses", str(exc)) from None
    if reader.value("signal") is not None:
        try:
            data["signal"] = parse_signal_option(reader.value("signal") or "")
        except ValueError as exc:
            raise reader.fail("signal", str(exc)) from None
    if "mail-type" in reader.options or "mail-user" in reader.options:
        try:
            mail, notes = mail_options(reader.value("mail-type"), reader.value("mail-user"))
        except MailOptionError as exc:
            raise reader.fail(exc.option, str(exc)) from None
        data.update(mail)
        reader.warnings.extend(f"{reader.where(reader.options[o].line)}: {m}" for o, m in notes)
    _job_terms(reader, data)
    export = apply_export(reader, data, submit_env, input_variables=input_variables)
    if (told := slurm_options(reader, export)) is not None:  # ($SLURM_NTASKS_PER_NODE…)
        data["slurm_options"] = told
    request = parse_request(data, source=source)
    reader.warnings.extend(signal_warnings(request.signal, request.walltime_s))
    return ParsedJob(request, tuple(reader.warnings))


def wrap_script(reader: Reader) -> str:
    """The script ``--wrap`` stands for, as sbatch writes it: ``#!/bin/sh`` and the command."""
    command = reader.value("wrap") or ""
    if not command:
        raise reader.fail("wrap", "--wrap needs a command line to run")
    return f"#!/bin/sh\n{command}\n"


def _build(reader: Reader, script: str) -> dict[str, object]:
    ntasks = reader.count("ntasks")
    per_node = reader.count("ntasks-per-node")
    nodes = _nodes(reader, ntasks, per_node)
    if ntasks is not None:
        replicas = ntasks
    elif per_node is not None:
        replicas = (nodes or 1) * per_node
    else:
        replicas = nodes or 1
    if nodes is not None and nodes > replicas:
        reader.warnings.append(
            f"{reader.where(reader.options['nodes'].line)}: {replicas} task(s) cannot use "
            f"{nodes} nodes; using {replicas}"
        )
        nodes = replicas
    placement: dict[str, object] = {}
    if per_node is not None:
        placement["max_tasks_per_node"] = per_node
    elif nodes is not None and nodes > 1:
        placement["max_tasks_per_node"] = math.ceil(replicas / nodes)
    if nodes == 1 and replicas > 1:  # (--ntasks-per-node or not: one host)
        placement["topology"] = {"key": LABEL_HOSTNAME, "mode": "required"}
    elif nodes is not None and replicas > nodes > 1 and "-" not in (reader.value("nodes") or ""):
        # exactly that many nodes, each with a task (as many tasks as nodes: the cap of 1
        # does it); a range (-N 2-4) may have more, as Slurm gives it: the cap alone
        placement["nodes"] = nodes
    tasks_per_node = per_node or (math.ceil(replicas / nodes) if nodes else replicas)

    accelerators = task_accelerators(reader, replicas, tasks_per_node)
    gpus = sum(amount for name, amount, _ in accelerators if name == GPU)  # per task
    cpus = task_cpus(reader, gpus)
    resources: dict[str, str] = {CPU: str(cpus)}
    memory = task_memory(reader, cpus, tasks_per_node, gpus)
    if memory:
        resources[MEMORY] = str(memory)
    selector: dict[str, str] = {}
    for name, amount, model in accelerators:
        resources[name] = str(amount)
        if model is not None:  # one GPU option at most, so one model
            selector[LABEL_GPU_MODEL] = model

    required: list[dict[str, object]] = []
    if reader.value("constraint") is not None:
        more, required = _constraint(reader)
        for key, value in more.items():
            if selector.get(key, value) != value:
                raise reader.fail(
                    "constraint", f"label {key} asked to be both {selector[key]} and {value}"
                )
            selector[key] = value
    required.extend(_hosts(reader, nodes))
    if selector:
        placement["node_selector"] = selector
    if required:
        placement["required"] = required
    if "exclusive" in reader.options:
        placement["exclusive"] = True  # whole nodes (--exclusive=user/mcs: the same here)
    if "hold" in reader.options and reader.value("hold"):
        raise reader.fail("hold", "--hold takes no value")

    group: dict[str, object] = {"name": "main", "replicas": replicas, "resources": resources}
    group["script"] = script
    if reader.value("chdir") is not None:
        group["workdir"] = reader.value("chdir")
    # (a script written for Slurm reads its variables: $SLURM_JOB_ID, $SLURM_CPUS_PER_TASK…)
    data: dict[str, object] = {"groups": [group], "placement": placement, "slurm_env": True}
    if "hold" in reader.options:
        data["hold"] = True  # submitted held: fusesched release lets it go
    default_name = "" if reader.source.startswith("<") else reader.source
    default_name = DEFAULT_NAMES.get(reader.source, default_name)  # ("sbatch" < job.sh)
    if "wrap" in reader.options:
        default_name = "wrap"  # as sbatch names a --wrap job
    data["name"] = reader.value("job-name") or default_name
    if reader.value("account"):
        data["tenant"] = reader.value("account")
    partition = reader.value("partition")
    if partition is not None:
        if "," in partition:
            raise reader.fail("partition", f"one partition please, not {partition!r}")
        data["queue"] = partition
    if reader.value("qos") is not None:
        data["qos"] = _qos(reader)
    if reader.value("time") is not None:
        try:
            data["walltime_s"] = parse_slurm_time(reader.value("time") or "")
        except ValueError as exc:
            raise reader.fail("time", str(exc)) from None
    if reader.value("array") is not None:
        try:
            data["array"] = parse_array(reader.value("array") or "").model_dump()
        except ValueError as exc:
            raise reader.fail("array", str(exc)) from None
    if reader.value("dependency"):
        try:
            deps = parse_dependencies(reader.value("dependency") or "")
        except ValueError as exc:
            raise reader.fail("dependency", str(exc)) from None
        data["dependencies"] = [d.model_dump() for d in deps]
    default_output = "slurm-%A_%a.out" if "array" in data else "slurm-%j.out"
    data["output"] = reader.value("output") or default_output
    if reader.value("error"):
        data["error"] = reader.value("error")
    return data


def _job_terms(reader: Reader, data: dict[str, object]) -> None:
    """``--comment``, ``--nice``/``--priority``, ``--requeue``/``--no-requeue``,
    ``--open-mode`` and ``--kill-on-invalid-dep`` into ``data``."""

    def read(name: str, reader_of: Callable[[str], _T]) -> _T:
        try:
            return reader_of(reader.value(name) or "")
        except ValueError as exc:
            raise reader.fail(name, str(exc)) from None

    def warn(name: str, messages: Sequence[str]) -> None:
        where = reader.where(reader.options[name].line)
        reader.warnings.extend(f"{where}: {message}" for message in messages)

    if "comment" in reader.options:
        comment = reader.value("comment") or ""
        if "\n" in comment or "\r" in comment:
            raise reader.fail("comment", "must be one line")
        if (control := comment_control(comment)) is not None:
            raise reader.fail("comment", control)
        if len(comment) > MAX_COMMENT:
            raise reader.fail(
                "comment", f"the comment is {len(comment)} characters long: at most {MAX_COMMENT}"
            )
        data["comment"] = comment
    if "priority" in reader.options:
        data["priority"] = read("priority", explicit_priority)
        if "nice" in reader.options:
            warn("nice", ["--nice is ignored: --priority sets the job's priority (as Slurm)"])
    elif "nice" in reader.options:
        data["priority"] = read("nice", nice_priority)
    if "requeue" in reader.options:
        if reader.value("requeue"):
            raise reader.fail("requeue", "takes no value")
        # (preempted: cancelled; a node failure: failed; fusesched requeue: refused)
        data["requeue"] = reader.options["requeue"].option != "--no-requeue"
    if "open-mode" in reader.options:
        data["open_mode"] = read("open-mode", open_mode)
    if "kill-on-invalid-dep" in reader.options:
        warn("kill-on-invalid-dep", read("kill-on-invalid-dep", kill_on_invalid_dep))


def _nodes(reader: Reader, ntasks: int | None, per_node: int | None) -> int | None:
    """``--nodes``: a count, or of a range the least the tasks need (``-n`` over
    ``--ntasks-per-node``, at least its minimum; a warning says which). As Slurm's, ``-n``
    with ``--ntasks-per-node`` needing more nodes than ``-N`` allows (one count: the most)
    is refused."""
    text = reader.value("nodes")
    if text is None:
        return None
    low, dash, high = text.partition("-")
    if not digits(low) or int(low) < 1 or (dash and not (digits(high) and int(high) >= int(low))):
        raise reader.fail("nodes", f"expected a node count such as 4 or 2-4, got {text!r}")
    most = int(high) if dash else int(low)
    needed = -(-ntasks // per_node) if ntasks is not None and per_node is not None else 0
    if needed > most:
        raise reader.fail(
            "nodes",
            f"{ntasks} tasks at most {per_node} per node (--ntasks-per-node) need {needed} "
            f"nodes; -N {text} allows at most {most} (Slurm: Requested node configuration "
            "is not available)",
        )
    count = max(int(low), needed)
    if dash:
        reader.warnings.append(
            f"{reader.where(reader.options['nodes'].line)}: node range {text}: using "
            + (f"{count}, what the tasks need" if count > int(low) else f"the minimum, {low}")
        )
    return count


def _hosts(reader: Reader, nodes: int | None) -> list[dict[str, object]]:
    """``--nodelist`` → ``kubernetes.io/hostname In [...]``, ``--exclude`` → ``NotIn``."""
    listed: dict[str, list[str]] = {}
    for name in ("nodelist", "exclude"):
        text = reader.value(name)
        if text is None:
            continue
        try:
            listed[name] = expand_hostlist(text)
        except ValueError as exc:
            raise reader.fail(name, str(exc)) from None
    both = sorted(set(listed.get("nodelist", ())) & set(listed.get("exclude", ())))
    if both:
        raise reader.fail("exclude", f"{', '.join(both)}: both in --nodelist and excluded")
    hosts = listed.get("nodelist")
    if hosts is not None and nodes is not None and nodes > len(hosts):
        reader.warnings.append(
            f"{reader.where(reader.options['nodelist'].line)}: {nodes} nodes asked for but "
            f"{len(hosts)} listed: the job runs on the listed nodes only"
        )
    ops = {"nodelist": LabelOp.IN, "exclude": LabelOp.NOT_IN}
    return [
        LabelRequirementRequest(key=LABEL_HOSTNAME, op=ops[name], values=hosts).model_dump()
        for name, hosts in listed.items()
    ]


def _qos(reader: Reader) -> str:
    text = (reader.value("qos") or "").lower()
    if text not in QOS_NAMES:
        raise reader.fail(
            "qos",
            f"unknown QoS {text!r}: use gold, silver or bronze (or high, normal, low)",
        )
    return QOS_NAMES[text].value


def _constraint(reader: Reader) -> tuple[dict[str, str], list[dict[str, object]]]:
    """``key=value`` terms become a node selector, bare features ``Exists`` requirements on
    ``feature.fusesched.io/<feature>``; ``&`` (and ``,``) join terms; ``k=a|k=b`` is ``In``."""
    text = reader.value("constraint") or ""
    selector: dict[str, str] = {}
    required: list[dict[str, object]] = []
    for raw in re.split(r"[&,]", text):
        term = raw.strip()
        if term.startswith("[") and term.endswith("]"):
            term = term[1:-1]
        if not term or any(ch in term for ch in "*()[]"):
            raise reader.fail(
                "constraint",
                f"cannot read {raw.strip()!r} (supported: feature, key=value, & and key=a|key=b)",
            )
        alternatives = [a.strip() for a in term.split("|")]
        pairs = [a.partition("=") for a in alternatives]
        if len(alternatives) == 1:
            key, eq, value = pairs[0]
            if eq:
                key, value = key.strip(), value.strip()
                if selector.get(key, value) != value:
                    shown = f"{selector[key]} and {value}"
                    raise reader.fail("constraint", f"label {key} asked to be both {shown}")
                selector[key] = value
            else:
                required.append(
                    LabelRequirementRequest(
                        key=FEATURE_LABEL_PREFIX + key, op=LabelOp.EXISTS
                    ).model_dump()
                )
            continue
        keys = {key.strip() for key, eq, _ in pairs if eq}
        if len(keys) != 1 or not all(eq for _, eq, _ in pairs):
            raise reader.fail(
                "constraint",
                f"{term!r}: 'or' is supported only between values of one label (gpu=a100|gpu=h100)",
            )
        required.append(
            LabelRequirementRequest(
                key=keys.pop(), op=LabelOp.IN, values=[v.strip() for _, _, v in pairs]
            ).model_dump()
        )
    return selector, required
