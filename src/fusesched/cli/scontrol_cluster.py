"""``fusesched scontrol ping``, ``version``, ``show config``, ``show steps`` and ``show
topology``: what Slurm's scontrol says of the controller and of running steps, from what
fusesched's controller answers; and the commands that cannot be done here, refused saying
why (:data:`REFUSED`).

``ping`` asks each controller address (``FUSESCHED_CONTROLLER``, several for a standby)
for its health (``GET /healthz``): ``Slurmctld(primary) at HOST is UP`` (the first, then
``backup``), exit 1 when one is DOWN. ``show config`` says only what is known for certain
(Slurm's ``Key = Value`` lines under ``Configuration data as of …``): the cluster's name, the
controllers' hosts and port, the Slurm release the commands follow, the kinds of scheduling
fusesched does (backfill, multifactor priority, CPUs and memory as consumable resources) and
the licenses; settings the controller keeps to itself (its grace before SIGKILL, how long
ended jobs are kept) are left out, not guessed. ``show steps`` lists running steps (``GET
/v1/jobs?steps=true``) in scontrol's layout, leaving out what fusesched does not know of a
step (its CPUs, TRES, srun's host and pid). fusesched has no network topology: ``show
topology`` says so as Slurm's does without one (on stderr, exit 0).
"""

from __future__ import annotations

import sys
import time
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from fusesched.cli.scontrol_update import ScontrolError

Client = Any
#: ``show``'s words for steps, config and topology.
SHOWN: Final = {
    **dict.fromkeys(("step", "steps"), "steps"),
    **dict.fromkeys(("config", "configuration"), "config"),
    "topology": "topology",
}
#: The most running jobs ``show steps`` reads (one ``GET /v1/jobs``).
MAX_JOBS: Final = 1000
NO_TOPOLOGY: Final = "scontrol: error: No topology information available"
#: What Slurm's scontrol does that fusesched cannot, with why.
REFUSED: Final = {
    "suspend": "fusesched does not suspend jobs (no job is ever SUSPENDED); hold a waiting "
    "job (scontrol hold), or requeue a running one (scontrol requeue)",
    "resume": "fusesched does not suspend jobs, so none can be resumed (scontrol release "
    "lets a held job start)",
    "listpids": "the processes of a job are known to the agent on its node alone, which "
    "answers no such question; fusesched logs and fusesched eff say what a job's tasks did",
    "notify": "fusesched has no way to reach a job's terminal (srun's or salloc's) with a "
    "message; scancel --signal sends a running job a signal it can catch",
    "top": "a job's own priority is one factor of fusesched's multifactor priority, and "
    "only an admin may raise it (scontrol update JobId=ID Priority=N); a user may lower "
    "the others' (Priority= or Nice=)",
}


def version_line() -> str:
    """``scontrol version`` (and ``-V``): the line every Slurm command prints for ``-V``."""
    from fusesched.cli.slurm_version import version_line as line

    return line()


def host(url: str) -> str:
    """The host of a controller's address (``http://head:8642`` → ``head``)."""
    return urllib.parse.urlsplit(url).hostname or url


def ping_lines(answers: Sequence[tuple[str, bool]]) -> list[str]:
    """``ping``'s lines: each controller (its URL, whether it answered healthy)."""
    out = []
    for at, (url, up) in enumerate(answers):
        role = "primary" if at == 0 else "backup" if len(answers) == 2 else f"backup{at}"
        out.append(f"Slurmctld({role}) at {host(url)} is {'UP' if up else 'DOWN'}")
    return out


def ping(client: Client, ca: Any = None) -> int:
    """``scontrol ping``: each controller address asked for its health; 1 if one is down."""
    answers = _health(client, ca)
    sys.stdout.write("".join(line + "\n" for line in ping_lines(answers)))
    return 0 if all(up for _, up in answers) else 1


def _health(client: Client, ca: Any) -> list[tuple[str, bool]]:
    from fusesched.sdk import Client as Sdk
    from fusesched.sdk import ControllerError

    answers = []
    for url in client.urls:
        one = Sdk(url, timeout=10.0, token=client.token, ca=ca)
        try:
            up = one.health().get("status") == "ok"
        except ControllerError:
            up = False
        answers.append((url, up))
    return answers


def config_lines(
    urls: Sequence[str], licenses: Iterable[Mapping[str, Any]], now: float
) -> list[str]:
    """``show config``: what is known for certain, as ``Key = Value`` lines (the key 23
    wide, as Slurm's) under ``Configuration data as of``, in Slurm's order (by key)."""
    from fusesched.cli.clusters import CLUSTER_NAME
    from fusesched.cli.slurm_version import SLURM_VERSION
    from fusesched.cli.squeue_plan import MIN_JOB_AGE_S

    port = urllib.parse.urlsplit(urls[0]).port if urls else None
    said = ",".join(f"{lic['name']}:{lic['total']}" for lic in licenses)
    pairs: list[tuple[str, str]] = [
        ("ClusterName", CLUSTER_NAME),
        ("Licenses", said or "(null)"),
        ("MinJobAge", f"{MIN_JOB_AGE_S:.0f} sec"),  # (how long squeue lists an ended job)
        ("PriorityType", "priority/multifactor"),
        ("SchedulerType", "sched/backfill"),
        ("SelectType", "select/cons_tres"),
        ("SelectTypeParameters", "CR_CPU_MEMORY"),
        *((f"SlurmctldHost[{i}]", host(url)) for i, url in enumerate(urls)),
        ("SlurmctldPort", str(port) if port else "(null)"),
        ("SLURM_VERSION", SLURM_VERSION),
    ]
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now))
    return [f"Configuration data as of {stamp}", *(f"{k:<23} = {v}" for k, v in pairs)]


def show_config(client: Client, ca: Any = None) -> int:
    """``scontrol show config``: :func:`config_lines`, a blank line, then ``ping``'s, as
    Slurm's ends it."""
    lines = config_lines(client.urls, client.licenses(), time.time())
    answers = _health(client, ca)
    sys.stdout.write("\n".join([*lines, "", *ping_lines(answers)]) + "\n")
    return 0


def step_records(jobs: Iterable[Mapping[str, Any]], step: str | None) -> list[Any]:
    """The running steps of ``jobs`` (``GET /v1/jobs?steps=true``) as scontrol writes them;
    ``step``: that one only (``batch``, ``extern``, ``0``…)."""
    from fusesched.cli.live import slurm_duration
    from fusesched.cli.scontrol_show import _user, stamp
    from fusesched.hostlist import compress_hostlist

    out = []
    for job in jobs:
        limit = job.get("time_limit_s")
        for one in job.get("steps") or []:
            if one.get("end_time") is not None or (step is not None and one["step"] != step):
                continue
            nodes = list(one.get("nodes") or [])
            out.append(
                [
                    [
                        ("StepId", f"{job['id']}.{one['step']}"),
                        ("UserId", _user(str(job.get("user") or ""))),
                        ("StartTime", stamp(one.get("start_time"))),
                        ("TimeLimit", "UNLIMITED" if limit is None else slurm_duration(limit)),
                    ],
                    [
                        ("State", "RUNNING"),
                        ("Partition", str(job.get("queue") or "")),
                        ("NodeList", compress_hostlist(nodes) or "(null)"),
                    ],
                    [
                        ("Nodes", str(len(nodes))),
                        ("Tasks", str(one.get("ntasks") or one.get("tasks") or 0)),
                        ("Name", str(one.get("name") or "(null)")),
                    ],
                ]
            )
    return out


def show_steps(client: Client, name: str | None, oneliner: bool) -> int:
    """``scontrol show steps [JOB[.STEP]]``: the running steps (of that job; that step)."""
    from fusesched.cli.scontrol_show import render

    job_id, _, step = (name or "").partition(".")
    if name is None:
        jobs = list(reversed(client.jobs(states=["Running"], steps=True, limit=MAX_JOBS)))
    else:
        if not job_id:
            raise ScontrolError(f"'{name}' is no job step (JOB or JOB.STEP)")
        jobs = client.jobs(ids=[job_id], steps=True, limit=MAX_JOBS)
        if not jobs:
            return _said("slurm_get_job_steps error: Invalid job id specified")
    records = step_records(jobs, step or None)
    if not records:
        if name is None:
            sys.stdout.write("No job steps in the system\n")
            return 0
        return _said(f"Job step {job_id}.{step} not found")
    sys.stdout.write(render(records, oneliner))
    return 0


def show_topology(name: str | None) -> int:
    """``scontrol show topology [NAME]``: fusesched has none (as Slurm's without one)."""
    if name is None:
        sys.stderr.write(NO_TOPOLOGY + "\n")
    else:
        sys.stderr.write(
            f"scontrol: error: Topology information contains no switch or node named {name}\n"
        )
    return 0


def refuse(verb: str) -> int:
    """A command fusesched cannot do (:data:`REFUSED`): said, exit 1."""
    return _said(f"scontrol: error: '{verb}' is not supported here: {REFUSED[verb]}")


def _said(message: str) -> int:
    sys.stderr.write(message + "\n")
    return 1
