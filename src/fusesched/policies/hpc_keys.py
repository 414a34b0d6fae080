"""HPC queue-order keys: FCFS, SJF, F1, WFP3 and UNICEP.

Definitions follow ``anchors/rlscheduler/PROTOCOL.md`` section 6, with s = submit time, r =
estimate (requested time), n = processors and w = waiting time. A key is a tuple compared
lexicographically; the job with the lower key runs first.

``wfp3`` and ``unicep`` are the keys *as implemented* in the RLScheduler artifact, where the
waiting time of a queued job came out as w = -1 - s; they reproduce its published numbers.
``wfp3-textbook`` and ``unicep-textbook`` use the intended w = now - s and therefore depend on
the current time (``dynamic``).

Both forms of a key compute the same IEEE operations in the same order, so ``scalar`` and
``vector`` give bit-identical floats: basic arithmetic is correctly rounded in Python and NumPy
alike, and the transcendental functions (log2, log10, cube) are evaluated element by element
with Python's ``math`` in both. Degenerate inputs follow NumPy semantics instead of raising:
division by zero gives ±inf (0/0 gives NaN), the logarithm of 0 gives -inf and of a negative
number NaN.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["HPC_KEYS", "HpcKey"]

FloatArray = NDArray[np.float64]
ScalarFn = Callable[[float, float, float, float], tuple[float, ...]]
VectorFn = Callable[[FloatArray, FloatArray, FloatArray, float], tuple[FloatArray, ...]]

_GUARD = 1e-15
_F1_FLOOR = 0.1


@dataclass(frozen=True)
class HpcKey:
    """One queue-order key, usable per job (``scalar``) or over arrays (``vector``)."""

    name: str
    dynamic: bool
    description: str
    _scalar: ScalarFn = field(repr=False, compare=False)
    _vector: VectorFn = field(repr=False, compare=False)

    def scalar(self, submit: float, estimate: float, procs: int, now: float) -> tuple[float, ...]:
        """The key of one job at time ``now`` (ignored unless ``dynamic``)."""
        return self._scalar(float(submit), float(estimate), float(procs), float(now))

    def vector(
        self, submit: ArrayLike, estimate: ArrayLike, procs: ArrayLike, now: float
    ) -> tuple[FloatArray, ...]:
        """The keys of many jobs: one float64 array per tuple element (primary first).

        For ``np.lexsort`` pass the elements in reverse order (lexsort's last key is primary).
        """
        s, r, n = (np.array(a, dtype=np.float64, ndmin=1) for a in (submit, estimate, procs))
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return self._vector(s, r, n, float(now))


# --- IEEE-style primitives shared by both forms -----------------------------------------------


def _div(a: float, b: float) -> float:
    """a / b with NumPy's semantics for a zero divisor."""
    if b != 0.0:
        return a / b
    if a == 0.0 or math.isnan(a):
        return math.nan
    return math.copysign(math.inf, a) * math.copysign(1.0, b)


def _log2(x: float) -> float:
    if x > 0.0:
        return math.log2(x)
    return -math.inf if x == 0.0 else math.nan


def _log10(x: float) -> float:
    if x > 0.0:
        return math.log10(x)
    return -math.inf if x == 0.0 else math.nan


def _cube(x: float) -> float:
    """x ** 3 through the C library's pow, as Python computes it, saturating to ±inf."""
    try:
        return x**3
    except OverflowError:
        return math.copysign(math.inf, x)


def _each(fn: Callable[[float], float], x: FloatArray) -> FloatArray:
    """Apply a scalar primitive element-wise (keeps ``vector`` bit-identical to ``scalar``)."""
    return np.fromiter(map(fn, x.tolist()), dtype=np.float64, count=x.size)


# --- the keys --------------------------------------------------------------------------------


def _fcfs(s: float, r: float, n: float, now: float) -> tuple[float, ...]:
    return (s,)


def _fcfs_v(s: FloatArray, r: FloatArray, n: FloatArray, now: float) -> tuple[FloatArray, ...]:
    return (s,)


def _sjf(s: float, r: float, n: float, now: float) -> tuple[float, ...]:
    return (r, s)


def _sjf_v(s: FloatArray, r: FloatArray, n: FloatArray, now: float) -> tuple[FloatArray, ...]:
    return (r, s)


def _f1(s: float, r: float, n: float, now: float) -> tuple[float, ...]:
    r = r if r > 0.0 else _F1_FLOOR
    s = s if s > 0.0 else _F1_FLOOR
    return (_log10(r) * n + 870.0 * _log10(s),)


def _f1_v(s: FloatArray, r: FloatArray, n: FloatArray, now: float) -> tuple[FloatArray, ...]:
    r = np.where(r > 0.0, r, _F1_FLOOR)
    s = np.where(s > 0.0, s, _F1_FLOOR)
    return (_each(_log10, r) * n + 870.0 * _each(_log10, s),)


def _wfp3_of(w: float, r: float, n: float) -> float:
    """-(w / r)³ · n."""
    return -_cube(_div(w, r)) * n


def _wfp3_of_v(w: FloatArray, r: FloatArray, n: FloatArray) -> FloatArray:
    return -_each(_cube, w / r) * n


def _unicep_of(w: float, r: float, n: float) -> float:
    """-(w + 1e-15) / (log2(n + 1e-15) · r)."""
    return _div(-(w + _GUARD), _log2(n + _GUARD) * r)


def _unicep_of_v(w: FloatArray, r: FloatArray, n: FloatArray) -> FloatArray:
    result: FloatArray = -(w + _GUARD) / (_each(_log2, n + _GUARD) * r)
    return result


def _wfp3(s: float, r: float, n: float, now: float) -> tuple[float, ...]:
    return (_wfp3_of(-1.0 - s, r, n),)


def _wfp3_v(s: FloatArray, r: FloatArray, n: FloatArray, now: float) -> tuple[FloatArray, ...]:
    return (_wfp3_of_v(-1.0 - s, r, n),)


def _unicep(s: float, r: float, n: float, now: float) -> tuple[float, ...]:
    return (_unicep_of(-1.0 - s, r, n),)


def _unicep_v(s: FloatArray, r: FloatArray, n: FloatArray, now: float) -> tuple[FloatArray, ...]:
    return (_unicep_of_v(-1.0 - s, r, n),)


def _wfp3_textbook(s: float, r: float, n: float, now: float) -> tuple[float, ...]:
    return (_wfp3_of(now - s, r, n),)


def _wfp3_textbook_v(
    s: FloatArray, r: FloatArray, n: FloatArray, now: float
) -> tuple[FloatArray, ...]:
    return (_wfp3_of_v(now - s, r, n),)


def _unicep_textbook(s: float, r: float, n: float, now: float) -> tuple[float, ...]:
    return (_unicep_of(now - s, r, n),)


def _unicep_textbook_v(
    s: FloatArray, r: FloatArray, n: FloatArray, now: float
) -> tuple[FloatArray, ...]:
    return (_unicep_of_v(now - s, r, n),)


HPC_KEYS: Mapping[str, HpcKey] = MappingProxyType(
    {
        key.name: key
        for key in (
            HpcKey("fcfs", False, "first come, first served: s", _fcfs, _fcfs_v),
            HpcKey("sjf", False, "shortest requested time first: (r, s)", _sjf, _sjf_v),
            HpcKey(
                "f1",
                False,
                "Carastan-Santos & de Camargo F1: log10(r)·n + 870·log10(s), r, s ≤ 0 → 0.1",
                _f1,
                _f1_v,
            ),
            HpcKey(
                "wfp3",
                False,
                "WFP3 as implemented by RLScheduler (w = -1 - s): n·((s + 1)/r)³",
                _wfp3,
                _wfp3_v,
            ),
            HpcKey(
                "unicep",
                False,
                "UNICEP as implemented by RLScheduler (w = -1 - s): (s + 1)/(log2(n + 1e-15)·r)",
                _unicep,
                _unicep_v,
            ),
            HpcKey(
                "wfp3-textbook",
                True,
                "WFP3 with w = now - s: -(w/r)³·n",
                _wfp3_textbook,
                _wfp3_textbook_v,
            ),
            HpcKey(
                "unicep-textbook",
                True,
                "UNICEP with w = now - s: -(w + 1e-15)/(log2(n + 1e-15)·r)",
                _unicep_textbook,
                _unicep_textbook_v,
            ),
        )
    }
)
