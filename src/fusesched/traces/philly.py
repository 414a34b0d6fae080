"""Loader for the Microsoft Philly GPU-cluster trace, in the Pollux artifact's processed form.

Files (see ``shared/traces/philly/SOURCE.md``):

* ``philly.csv`` — ``timestamp, duration, num_gpus, gpu_time, cluster``: one job per row,
  submit time as ``YYYY-MM-DD HH:MM:SS``, run time in seconds, GPUs, and the virtual cluster
  (VC, the tenant) it was submitted to; rows are not sorted;
* ``philly_vc.csv`` — ``vc, node num``: how many nodes the Helios study gives each large VC.

Every malformed row is reported with its file and 1-based line number. Jobs come back sorted
by submit time (ties keep file order), times in seconds from the first submission.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

JOB_COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")
VC_COLUMNS = ("vc", "node num")
_TIME_RE = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$")


class PhillyFormatError(ValueError):
    """A Philly file that cannot be read; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class PhillyJob:
    submit_s: float  # seconds after the trace's first submission
    duration_s: float
    gpus: int
    vc: str
    line: int  # where it came from, for messages


def _rows(path: Path, columns: Sequence[str]) -> list[tuple[int, dict[str, str]]]:
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise PhillyFormatError(f"{path}: cannot read: {exc.strerror}") from None
    with handle:
        reader = csv.DictReader(handle)
        header = [h.strip() for h in reader.fieldnames or []]
        missing = [c for c in columns if c not in header]
        if missing:
            raise PhillyFormatError(f"{path}:1: missing column(s) {', '.join(missing)}")
        reader.fieldnames = header
        out = []
        for row in reader:
            line = reader.line_num
            if not any((v or "").strip() for v in row.values()):
                continue  # the file ends with an empty line
            out.append((line, {k: (v or "").strip() for k, v in row.items() if k}))
        return out


def _number(path: Path, line: int, name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise PhillyFormatError(f"{path}:{line}: {name} is not a number: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise PhillyFormatError(f"{path}:{line}: {name} must be a non-negative number: {text!r}")
    return value


def load_philly_jobs(path: Path) -> list[PhillyJob]:
    rows = _rows(path, JOB_COLUMNS)
    if not rows:
        raise PhillyFormatError(f"{path}: no jobs")
    stamps = [row["timestamp"] for _, row in rows]
    if not all(_TIME_RE.fullmatch(s) for s in stamps):
        line, bad = next(
            (line, r["timestamp"]) for line, r in rows if not _TIME_RE.fullmatch(r["timestamp"])
        )
        raise PhillyFormatError(f"{path}:{line}: timestamp {bad!r} is not YYYY-MM-DD HH:MM:SS")
    try:
        seconds = np.array([s.replace(" ", "T") for s in stamps], dtype="datetime64[s]")
    except ValueError:  # a well-formed but impossible date (month 13, …)
        for line, row in rows:
            try:
                np.datetime64(row["timestamp"].replace(" ", "T"), "s")
            except ValueError:
                raise PhillyFormatError(
                    f"{path}:{line}: timestamp {row['timestamp']!r} is not a valid date"
                ) from None
        raise
    offsets = (seconds - seconds.min()).astype(np.int64)
    jobs = []
    for (line, row), offset in zip(rows, offsets.tolist(), strict=True):
        duration = _number(path, line, "duration", row["duration"])
        gpus = _number(path, line, "num_gpus", row["num_gpus"])
        if gpus < 1 or gpus != int(gpus):
            raise PhillyFormatError(f"{path}:{line}: num_gpus must be a whole number ≥ 1")
        if not row["cluster"]:
            raise PhillyFormatError(f"{path}:{line}: cluster (the VC) is empty")
        jobs.append(PhillyJob(float(offset), duration, int(gpus), row["cluster"], line))
    jobs.sort(key=lambda j: j.submit_s)  # stable: ties keep file order
    return jobs


def load_philly_vcs(path: Path) -> dict[str, int]:
    """VC → number of nodes."""
    out: dict[str, int] = {}
    for line, row in _rows(path, VC_COLUMNS):
        nodes = _number(path, line, "node num", row["node num"])
        if nodes != int(nodes) or nodes < 1:
            raise PhillyFormatError(f"{path}:{line}: node num must be a whole number ≥ 1")
        if row["vc"] in out:
            raise PhillyFormatError(f"{path}:{line}: VC {row['vc']!r} is listed twice")
        out[row["vc"]] = int(nodes)
    return out


def task_shape(gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """(tasks, GPUs per task) for a job of ``gpus`` GPUs on nodes of ``gpus_per_node``.

    A job that fits one node is one task; a larger one is split into equal tasks of at most
    a node's GPUs each (16 → 2 × 8, 12 → 3 × 4, 24 → 3 × 8).
    """
    if gpus <= gpus_per_node:
        return 1, gpus
    per = math.gcd(gpus, gpus_per_node)
    return gpus // per, per


def share_of(vcs: Mapping[str, int]) -> dict[str, float]:
    """Each VC's share of the cluster, by its node count."""
    total = sum(vcs.values())
    return {vc: nodes / total for vc, nodes in vcs.items()}
