"""A learned policy as a whole core configuration, the way it was trained.

A learned file fixes the queue order and records the backfilling and runtime prediction it
was trained with; :func:`learned_config` builds that :class:`CoreConfig`, so that
``--policy learned`` (the shipped file) or ``--policy learned:FILE.json`` runs like a preset.
"""

from __future__ import annotations

from pathlib import Path

from fusesched.policies.learned.model import PREFIX, SHIPPED, load_model
from fusesched.policies.registry import CoreConfig

__all__ = ["is_learned", "learned_config"]


def is_learned(name: str) -> bool:
    """``learned`` or ``learned:PATH``."""
    return name == "learned" or name.startswith(PREFIX)


def learned_config(name: str, placement: str = "first-fit") -> CoreConfig:
    """The configuration of learned policy ``name``; raises
    :class:`~fusesched.policies.learned.model.LearnedPolicyError` for a bad file."""
    if not is_learned(name):
        raise ValueError(f"{name!r} is not a learned policy name")
    path = SHIPPED if name == "learned" else Path(name[len(PREFIX) :]).expanduser()
    model = load_model(path)
    return CoreConfig(
        queue_order=name,
        backfill=model.backfill,
        placement=placement,
        runtime_prediction=model.runtime_prediction,
    )
