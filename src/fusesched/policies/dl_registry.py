"""The DL scheduling policies by name (``fusesched simulate --protocol dl --policy …``).

Only ``sjf-oracle`` is given the true durations; every other factory is called without them,
so no other policy can read them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial

from fusesched.policies.dl_base import DlPolicy, FloatArray
from fusesched.policies.dl_baselines import FifoPolicy, LasPolicy, OracleSrtfPolicy
from fusesched.policies.dl_gittins import GittinsPolicy
from fusesched.policies.las_queues import MANY_QUEUES, TiresiasPolicy

_PLAIN: Mapping[str, Callable[[], DlPolicy]] = {
    "fifo": FifoPolicy,
    "las": LasPolicy,
    "tiresias-2q": partial(TiresiasPolicy, name="tiresias-2q"),
    "tiresias": partial(TiresiasPolicy, thresholds=MANY_QUEUES),
    "tiresias-mig": partial(
        TiresiasPolicy, thresholds=MANY_QUEUES, name="tiresias-mig", consolidate=True
    ),
    "gittins": GittinsPolicy,
    "gittins-burst": partial(GittinsPolicy, siblings=True, name="gittins-burst"),
}

#: name → one-line description
DL_POLICIES: Mapping[str, str] = {
    "fifo": "first come first served, non-preemptive, strict (no overtaking)",
    "sjf-oracle": "upper bound: shortest remaining GPU-time first from TRUE durations, preemptive",
    "las": "continuous 2D least-attained-service (GPU-seconds), preemptive",
    "tiresias-2q": "Tiresias-style discretised 2D-LAS: 2 queues split at 1 GPU-hour, FIFO "
    "within a queue, starvation promotion",
    "tiresias": "the same with 7 queues (0.5, 2, 8, 32, 128, 512 GPU-hours): the strongest "
    "setting found on the development trace (ITP cluster02)",
    "tiresias-mig": "`tiresias` plus the re-consolidation of spread jobs that `gittins` uses "
    "(like-for-like check of the placement mechanism)",
    "gittins": "ours: online Gittins index on 2D service (Kaplan-Meier from finished and "
    "running jobs, per VC and GPU-count class), preemption hysteresis, re-consolidation of "
    "spread jobs at checkpoints",
    "gittins-burst": "ours: `gittins`, and a job whose burst siblings (same VC and GPU count, "
    "submitted within 60 s of each other) have finished is treated as one of their median size",
}


class DlPolicyError(ValueError):
    """An unknown DL policy name."""


def make_dl_policy(name: str, oracle_durations: FloatArray) -> DlPolicy:
    """A fresh policy object; ``oracle_durations`` reaches only ``sjf-oracle``."""
    if name == "sjf-oracle":
        return OracleSrtfPolicy(oracle_durations.copy())
    if name not in _PLAIN:
        raise DlPolicyError(f"unknown DL policy {name!r}; choose from: {', '.join(DL_POLICIES)}")
    return _PLAIN[name]()
