"""A waiting job's reason as Slurm's commands print it: the code alone (``Resources``,
``Priority``, ``Dependency``, ``JobHeldUser``, ``BeginTime``…), where fusesched's own
commands say more (``Dependency: job 12``, ``held: waiting for data``, ``begin time
2026-12-07 18:00:00 +0000``). Scripts written for Slurm compare the code
(``squeue -h -o %r -j $ID`` = ``Dependency``), so ``squeue`` by Slurm's name prints it."""

from __future__ import annotations

from typing import Any, Final

from fusesched.cli.squeue_format import slurm_state

#: (the controller's and the core's words, kept here so that listing jobs imports neither:
#: tests/cli/test_slurm_reasons.py checks they are the same)
ADMIN_PREFIX: Final = "held by administrator: "  # controller/holds.py
USER_PREFIX: Final = "held: "
AT_SUBMIT: Final = "submitted held"
REQ_NODE_NOT_AVAIL: Final = "ReqNodeNotAvail"  # core/pending_reasons.py
#: Reasons fusesched words in its own way, by how they start, and Slurm's code for each.
_PREFIXES: Final = (
    (ADMIN_PREFIX, "JobHeldAdmin"),
    (USER_PREFIX, "JobHeldUser"),
    (AT_SUBMIT, "JobHeldUser"),
    ("held", "JobHeldUser"),
    ("begin time ", "BeginTime"),
    ("reservation ", "Reservation"),
    ("waiting for licenses", "Licenses"),
    ("released", "None"),
)


#: The reason Slurm's squeue gives a job that runs or has ended, by its state (a real
#: Slurm 22.05 here: a failed job ``NonZeroExitCode``, a completed or cancelled one ``None``).
_ENDED: Final = {
    "FAILED": "NonZeroExitCode",
    "TIMEOUT": "TimeLimit",
    "NODE_FAIL": "NodeDown",
    "OUT_OF_MEMORY": "OutOfMemory",
}


def job_reason(job: dict[str, Any]) -> str:
    """The code Slurm's squeue prints for ``job`` (a job's view): a waiting job's from its
    stored reason (:func:`slurm_reason`), a running or ended one's from its state (fusesched
    stores ``exit 3`` or ``cancelled by user`` as the reason of an ended job)."""
    if job.get("state") == "Pending":
        return slurm_reason(job.get("reason"))
    return _ENDED.get(slurm_state(job), "None")


def slurm_reason(reason: str | None) -> str:
    """The code Slurm's squeue (``%r``) prints for a job's stored ``reason``: ``None`` for
    none, the first word of the core's (``Priority: waits while …`` → ``Priority``;
    ``Resources; requeued (…)`` → ``Resources``), Slurm's form of an unavailable node
    (``ReqNodeNotAvail, UnavailableNodes:n3,n4``); a requeued job waiting out its back-off
    ``BeginTime``; a job pending in an external pool the pool's own code; a reason fusesched
    has no code for as it is."""
    text = " ".join((reason or "").split())
    if not text:
        return "None"
    if text.startswith("pending in pool "):  # (pending in pool hpc: Resources)
        return slurm_reason(text.partition(": ")[2])
    if text.startswith("requeued"):
        return "BeginTime" if "eligible at" in text else "None"
    for prefix, code in _PREFIXES:
        if text.startswith(prefix):
            return code
    head = text.split(";", 1)[0]
    code, _, detail = head.partition(":")
    if code == REQ_NODE_NOT_AVAIL:
        nodes = [part.split()[0] for part in detail.split(",") if part.split()]
        return f"{REQ_NODE_NOT_AVAIL}, UnavailableNodes:{','.join(nodes)}"
    if code and " " not in code:
        return code
    return text
