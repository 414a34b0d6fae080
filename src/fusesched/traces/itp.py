"""Loader for Microsoft's ITP GPU-cluster job traces (ElasticFlow, ASPLOS'23).

Files (see ``shared/traces/microsoft-itp-elasticflow/SOURCE.md``):

* ``raw-traces/clusterNN.csv`` — ``job_id, submission_time, duration, num_gpu``: one job per
  row, submit time in seconds from the start of collection, run time in seconds, GPUs;
* ``elasticflow-traces/clusterNN.csv`` — the same jobs with synthetic extra columns
  (``num_iteration, model_name, deadline, batch_size``) that this loader ignores.

Both forms are read by :func:`load_itp_jobs`; only the four real columns are used. Every
malformed row is reported with its file and 1-based line number. Jobs come back sorted by submit
time (ties keep file order), times in seconds from the first submission of the file.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

JOB_COLUMNS = ("job_id", "submission_time", "duration", "num_gpu")


class ItpFormatError(ValueError):
    """An ITP file that cannot be read; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class ItpJob:
    job_id: str
    submit_s: float  # seconds after the file's first submission
    duration_s: float
    gpus: int
    line: int  # where it came from, for messages


def _number(path: Path, line: int, name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ItpFormatError(f"{path}:{line}: {name} is not a number: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ItpFormatError(f"{path}:{line}: {name} must be a non-negative number: {text!r}")
    return value


def load_itp_jobs(path: Path) -> list[ItpJob]:
    """The jobs of one ITP cluster file (raw or ElasticFlow form)."""
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise ItpFormatError(f"{path}: cannot read: {exc.strerror}") from None
    raw: list[tuple[int, str, float, float, int]] = []
    seen: dict[str, int] = {}
    with handle:
        reader = csv.reader(handle)
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise ItpFormatError(f"{path}: empty file (no header)") from None
        missing = [c for c in JOB_COLUMNS if c not in header]
        if missing:
            raise ItpFormatError(f"{path}:1: missing column(s) {', '.join(missing)}")
        col = {name: header.index(name) for name in JOB_COLUMNS}
        for row in reader:
            line = reader.line_num
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                raise ItpFormatError(
                    f"{path}:{line}: expected {len(header)} fields, found {len(row)}"
                )
            job_id = row[col["job_id"]].strip()
            if not job_id:
                raise ItpFormatError(f"{path}:{line}: job_id is empty")
            if job_id in seen:
                raise ItpFormatError(
                    f"{path}:{line}: job_id {job_id!r} already on line {seen[job_id]}"
                )
            seen[job_id] = line
            submit = _number(path, line, "submission_time", row[col["submission_time"]].strip())
            duration = _number(path, line, "duration", row[col["duration"]].strip())
            gpus = _number(path, line, "num_gpu", row[col["num_gpu"]].strip())
            if gpus < 1 or gpus != int(gpus):
                raise ItpFormatError(f"{path}:{line}: num_gpu must be a whole number ≥ 1")
            raw.append((line, job_id, submit, duration, int(gpus)))
    if not raw:
        raise ItpFormatError(f"{path}: no jobs")
    first = min(r[2] for r in raw)
    jobs = [
        ItpJob(job_id, submit - first, dur, gpus, line) for line, job_id, submit, dur, gpus in raw
    ]
    jobs.sort(key=lambda j: j.submit_s)  # stable: ties keep file order
    return jobs


def itp_cluster_files(folder: Path) -> dict[str, Path]:
    """``clusterNN`` → file, for the ``clusterNN.csv`` files of a trace folder, in name order."""
    if not folder.is_dir():
        raise ItpFormatError(f"{folder}: not a folder")
    files = {p.stem: p for p in sorted(folder.glob("cluster*.csv"))}
    if not files:
        raise ItpFormatError(f"{folder}: no clusterNN.csv files")
    return files
