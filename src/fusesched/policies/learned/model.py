"""A learned queue order: a linear priority function over per-job features.

Each waiting job gets a score ``w · f(job, now)``; the job with the lowest score runs first and
the submit time breaks ties (then the arrival sequence, as for every order). The features use
only what the core knows of a queued job at the moment it orders the queue (its submit time,
its run-time estimate — the request, or a prediction learned from finished jobs — and its
size) and the current time: no run time, no later arrival, nothing about other jobs.

A model is saved as a small JSON file (weights, feature names and scales, the objective and
the traces it was trained on) and loaded without retraining; :func:`load_model` validates the
file and raises :class:`LearnedPolicyError` with a plain reason for a bad one.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fusesched.policies.hpc_keys import HpcKey

__all__ = [
    "FEATURES",
    "FORMAT",
    "SHIPPED",
    "LearnedModel",
    "LearnedPolicyError",
    "feature_matrix",
    "learned_key",
    "load_model",
    "model_from_dict",
    "save_model",
    "shipped_key",
]

FloatArray = npt.NDArray[np.float64]

FORMAT = "fusesched-learned-policy"
VERSION = 1
PREFIX = "learned:"

#: The features, in order. Each is a logarithm of a quantity known when the queue is ordered,
#: divided by a fixed scale (kept in the file) so that weights are comparable.
FEATURES: tuple[str, ...] = (
    "log_estimate",  # log10 of the run-time estimate (s, at least 1)
    "log_procs",  # log2 of the processors asked for (at least 1)
    "log_wait",  # log10(1 + time waited so far)
    "log_slowdown_now",  # log10 of the bounded slowdown if the job started now (≥ 0)
    "log_area",  # log10 of estimate × processors (CPU-seconds asked for)
)
DEFAULT_SCALES: tuple[float, ...] = (5.0, 10.0, 5.0, 3.0, 8.0)
BOUND_S = 10.0  # the bounded-slowdown threshold used by the slowdown-now feature

#: The trained policy that ships with fusesched (``--policy learned``, and the queue order of
#: ``--policy default``: policies/presets.py).
SHIPPED = Path(__file__).with_name("learned.json")


class LearnedPolicyError(ValueError):
    """A learned-policy file that cannot be used (missing, not JSON, wrong fields)."""


@dataclass(frozen=True)
class LearnedModel:
    """Weights over :data:`FEATURES`; ``meta`` records how the model was made."""

    weights: tuple[float, ...]
    scales: tuple[float, ...] = DEFAULT_SCALES
    name: str = "learned"
    backfill: str = "easy"
    runtime_prediction: str = "user-last2"
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if len(self.weights) != len(FEATURES) or len(self.scales) != len(FEATURES):
            raise LearnedPolicyError(f"a model needs {len(FEATURES)} weights and scales")
        if not all(math.isfinite(w) for w in self.weights):
            raise LearnedPolicyError("weights must be finite numbers")
        if not all(math.isfinite(s) and s > 0 for s in self.scales):
            raise LearnedPolicyError("scales must be positive finite numbers")

    def scores(
        self, submit: FloatArray, estimate: FloatArray, procs: FloatArray, now: float
    ) -> FloatArray:
        """Each job's score (lower runs first)."""
        feats = feature_matrix(submit, estimate, procs, now)
        # column by column in a fixed order (not a BLAS product, whose rounding can depend on
        # the number of rows): a job's score does not depend on what else is queued
        result: FloatArray = np.zeros(feats.shape[0], dtype=np.float64)
        for j, (w, scale) in enumerate(zip(self.weights, self.scales, strict=True)):
            result += feats[:, j] * (w / scale)
        return result

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "name": self.name,
            "model": "linear",
            "features": list(FEATURES),
            "scales": list(self.scales),
            "weights": list(self.weights),
            "backfill": self.backfill,
            "runtime_prediction": self.runtime_prediction,
            **dict(self.meta),
        }


def feature_matrix(
    submit: FloatArray, estimate: FloatArray, procs: FloatArray, now: float
) -> FloatArray:
    """The unscaled features of each job (one row per job, one column per :data:`FEATURES`).

    Row ``i`` depends on job ``i``'s facts and ``now`` only."""
    s = np.asarray(submit, dtype=np.float64)
    est = np.nan_to_num(np.asarray(estimate, dtype=np.float64), nan=1.0, posinf=1e12)
    est = np.clip(est, 1.0, 1e12)
    n = np.clip(np.asarray(procs, dtype=np.float64), 1.0, None)
    wait = np.clip(now - s, 0.0, None)
    out = np.empty((s.shape[0], len(FEATURES)), dtype=np.float64)
    out[:, 0] = np.log10(est)
    out[:, 1] = np.log2(n)
    out[:, 2] = np.log10(1.0 + wait)
    out[:, 3] = np.log10(np.maximum(1.0, (wait + est) / np.maximum(est, BOUND_S)))
    out[:, 4] = out[:, 0] + np.log10(n)
    return out


# --- the queue-order key ------------------------------------------------------------------


def learned_key(model: LearnedModel, name: str) -> HpcKey:
    """The model as a dynamic queue-order key: (score, submit)."""

    def vector(s: FloatArray, r: FloatArray, n: FloatArray, now: float) -> tuple[FloatArray, ...]:
        return (model.scores(s, r, n, now), s)

    def scalar(s: float, r: float, n: float, now: float) -> tuple[float, ...]:
        one = np.array([s]), np.array([r]), np.array([n])
        return tuple(float(k[0]) for k in vector(*one, now))

    return HpcKey(name, True, _describe(model), scalar, vector)


def _describe(model: LearnedModel) -> str:
    terms = " ".join(f"{w:+.3f}·{f}" for w, f in zip(model.weights, FEATURES, strict=True))
    return f"learned linear priority (lowest first): {terms}"


@cache
def _shipped_model() -> LearnedModel:
    return load_model(SHIPPED)


def shipped_key() -> HpcKey:
    """The shipped model's key, read from its file on first use (not at import)."""

    def vector(s: FloatArray, r: FloatArray, n: FloatArray, now: float) -> tuple[FloatArray, ...]:
        return (_shipped_model().scores(s, r, n, now), s)

    def scalar(s: float, r: float, n: float, now: float) -> tuple[float, ...]:
        one = np.array([s]), np.array([r]), np.array([n])
        return tuple(float(k[0]) for k in vector(*one, now))

    description = (
        "learned linear priority over log estimate, size, wait and slowdown-so-far, trained in "
        "the simulator (docs/LEARNED_POLICY.md); learned:FILE.json loads another"
    )
    return HpcKey("learned", True, description, scalar, vector)


def key_for_name(name: str) -> HpcKey:
    """The key of ``learned:PATH`` (the file is read once per path, size and change time)."""
    path = Path(name[len(PREFIX) :]).expanduser()
    try:
        stat = os.stat(path)
    except OSError as exc:
        raise LearnedPolicyError(
            f"learned policy file {str(path)!r} cannot be read: {exc.strerror}"
        ) from None
    return _cached_key(str(path.resolve()), stat.st_mtime_ns, stat.st_size, name)


@lru_cache(maxsize=16)
def _cached_key(path: str, mtime_ns: int, size: int, name: str) -> HpcKey:
    return learned_key(load_model(Path(path)), name)


# --- files --------------------------------------------------------------------------------


def save_model(model: LearnedModel, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(model.to_dict(), indent=2) + "\n", encoding="utf-8")


def load_model(path: Path) -> LearnedModel:
    """Read and validate a saved model."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LearnedPolicyError(
            f"learned policy file {str(path)!r} cannot be read: {exc}"
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LearnedPolicyError(f"learned policy file {str(path)!r} is not JSON: {exc}") from None
    try:
        return model_from_dict(data)
    except LearnedPolicyError as exc:
        raise LearnedPolicyError(f"learned policy file {str(path)!r}: {exc}") from None


def _numbers(data: Mapping[str, Any], key: str) -> tuple[float, ...]:
    value = data.get(key)
    if not isinstance(value, list) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in value
    ):
        raise LearnedPolicyError(f"{key!r} must be a list of numbers")
    if len(value) != len(FEATURES):
        raise LearnedPolicyError(
            f"{key!r} has {len(value)} entries; the features are {len(FEATURES)}"
        )
    return tuple(float(v) for v in value)


def model_from_dict(data: object) -> LearnedModel:
    """A model from its saved form; :class:`LearnedPolicyError` says what is wrong."""
    from fusesched.policies.runtime_prediction import RUNTIME_PREDICTORS

    if not isinstance(data, dict):
        raise LearnedPolicyError("the file must hold a JSON object")
    if data.get("format") != FORMAT:
        raise LearnedPolicyError(f'not a learned policy ("format" must be {FORMAT!r})')
    if data.get("version") != VERSION:
        raise LearnedPolicyError(
            f"unsupported version {data.get('version')!r} (this reads {VERSION})"
        )
    if data.get("model") != "linear":
        raise LearnedPolicyError(f"unsupported model {data.get('model')!r} (this reads 'linear')")
    if data.get("features") != list(FEATURES):
        raise LearnedPolicyError(
            f"features must be exactly {list(FEATURES)}, got {data.get('features')!r}"
        )
    weights = _numbers(data, "weights")
    scales = _numbers(data, "scales")
    backfill = data.get("backfill", "easy")
    if backfill not in ("none", "easy", "conservative"):
        raise LearnedPolicyError(f"unknown backfill {backfill!r}")
    prediction = data.get("runtime_prediction", "none")
    if prediction not in RUNTIME_PREDICTORS:
        raise LearnedPolicyError(f"unknown runtime prediction {prediction!r}")
    name = data.get("name", "learned")
    if not isinstance(name, str):
        raise LearnedPolicyError("'name' must be a string")
    known = {"format", "version", "name", "model", "features", "scales", "weights"}
    known |= {"backfill", "runtime_prediction"}
    meta = {k: v for k, v in data.items() if k not in known}
    return LearnedModel(weights, scales, name, backfill, prediction, meta)
