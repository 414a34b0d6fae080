"""Loader for the Alibaba GPU cluster trace v2023 ("openb", the FGD paper's trace).

Two kinds of CSV file (see ``shared/traces/alibaba-gpu-v2023/SOURCE.md``):

* node lists — ``sn, cpu_milli, memory_mib, gpu, model``;
* pod lists — ``name, cpu_milli, memory_mib, num_gpu, gpu_milli`` and, except in the
  ``multigpu*`` files, ``gpu_spec, qos, pod_phase, creation_time, deletion_time,
  scheduled_time``.

Rules (those of the FGD artifact, ``shared/anchors/fgd/PROTOCOL.md`` section 2): a pod with
``num_gpu`` = 0 is CPU-only and its ``gpu_milli`` is ignored; ``gpu_milli`` above 1,000 is
clamped to 1,000; a pod with ``num_gpu`` > 1 must take whole GPUs; ``gpu_spec`` is a
``|``-separated list of allowed GPU models (empty entries dropped, duplicates kept). Every
malformed row is reported with its file and 1-based line number.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
POD_OPTIONAL = ("gpu_spec", "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time")
GPU_MILLI = 1000


class OpenbFormatError(ValueError):
    """A node or pod list that cannot be read; the message names the file and line."""


@dataclass(frozen=True, eq=False)
class OpenbNodes:
    """A node list, one array entry per node, in file order."""

    path: Path
    names: tuple[str, ...]
    cpu_milli: IntArray
    memory_mib: IntArray
    gpus: IntArray
    model: tuple[str, ...]  # "" for CPU-only nodes

    def __len__(self) -> int:
        return len(self.names)

    @property
    def total_gpus(self) -> int:
        return int(self.gpus.sum())


@dataclass(frozen=True, eq=False)
class OpenbPods:
    """A pod list, one array entry per pod, in file order. Absent times are -1."""

    path: Path
    names: tuple[str, ...]
    cpu_milli: IntArray
    memory_mib: IntArray
    num_gpu: IntArray
    gpu_milli: IntArray  # per-GPU share in milli-GPU; 0 for CPU-only pods
    gpu_spec: tuple[tuple[str, ...], ...]  # allowed GPU models; () = any
    qos: tuple[str, ...]
    phase: tuple[str, ...]
    creation_time: IntArray
    deletion_time: IntArray
    scheduled_time: IntArray

    def __len__(self) -> int:
        return len(self.names)

    @property
    def gpu_request(self) -> IntArray:
        """Total GPU request per pod in milli-GPU (``num_gpu`` × ``gpu_milli``)."""
        request: IntArray = self.num_gpu * self.gpu_milli
        return request

    @property
    def sharing(self) -> npt.NDArray[np.bool_]:
        """Pods that take a share (less than all) of one GPU."""
        shared: npt.NDArray[np.bool_] = (self.num_gpu == 1) & (self.gpu_milli < GPU_MILLI)
        return shared


def _rows(path: Path, required: Sequence[str]) -> tuple[list[str], list[tuple[int, list[str]]]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError) as exc:
        raise OpenbFormatError(f"{path}: cannot read: {exc}") from exc
    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    if header is None:
        raise OpenbFormatError(f"{path}: the file is empty")
    header = [h.strip() for h in header]
    missing = [c for c in required if c not in header]
    if missing:
        raise OpenbFormatError(f"{path}:1: missing column(s) {', '.join(missing)}")
    rows = []
    for number, row in enumerate(reader, start=2):
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise OpenbFormatError(
                f"{path}:{number}: expected {len(header)} fields, found {len(row)}"
            )
        rows.append((number, [cell.strip() for cell in row]))
    if not rows:
        raise OpenbFormatError(f"{path}: no rows after the header")
    return header, rows


def _int(path: Path, number: int, column: str, cell: str, *, blank: int | None = None) -> int:
    if cell == "" and blank is not None:
        return blank
    try:
        value = int(cell)
    except ValueError:
        raise OpenbFormatError(
            f"{path}:{number}: {column} must be a whole number, not {cell!r}"
        ) from None
    if value < 0:
        raise OpenbFormatError(f"{path}:{number}: {column} must not be negative ({value})")
    return value


def _unique(path: Path, names: list[str], numbers: list[int], what: str) -> None:
    seen: dict[str, int] = {}
    for name, number in zip(names, numbers, strict=True):
        if not name:
            raise OpenbFormatError(f"{path}:{number}: the {what} name is empty")
        if name in seen:
            raise OpenbFormatError(
                f"{path}:{number}: {what} {name!r} already appears on line {seen[name]}"
            )
        seen[name] = number


def load_openb_nodes(path: str | Path) -> OpenbNodes:
    """Read a node list (``openb_node_list_*.csv``)."""
    path = Path(path)
    header, rows = _rows(path, NODE_COLUMNS)
    at = {c: header.index(c) for c in NODE_COLUMNS}
    names, numbers, cpu, mem, gpus, models = [], [], [], [], [], []
    for number, row in rows:
        names.append(row[at["sn"]])
        numbers.append(number)
        cpu.append(_int(path, number, "cpu_milli", row[at["cpu_milli"]]))
        mem.append(_int(path, number, "memory_mib", row[at["memory_mib"]]))
        count = _int(path, number, "gpu", row[at["gpu"]])
        model = row[at["model"]]
        if count and not model:
            raise OpenbFormatError(f"{path}:{number}: a node with {count} GPUs needs a model")
        gpus.append(count)
        models.append(model if count else "")
    _unique(path, names, numbers, "node")
    return OpenbNodes(
        path,
        tuple(names),
        np.array(cpu, dtype=np.int64),
        np.array(mem, dtype=np.int64),
        np.array(gpus, dtype=np.int64),
        tuple(models),
    )


def load_openb_pods(path: str | Path) -> OpenbPods:
    """Read a pod list (``openb_pod_list_*.csv``), applying the artifact's GPU rules."""
    path = Path(path)
    header, rows = _rows(path, POD_COLUMNS)
    at = {c: header.index(c) for c in (*POD_COLUMNS, *POD_OPTIONAL) if c in header}

    def text(row: list[str], column: str) -> str:
        return row[at[column]] if column in at else ""

    names: list[str] = []
    numbers: list[int] = []
    ints: dict[str, list[int]] = {
        c: [] for c in ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli", *POD_OPTIONAL[3:])
    }
    specs: list[tuple[str, ...]] = []
    qos: list[str] = []
    phase: list[str] = []
    for number, row in rows:
        names.append(row[at["name"]])
        numbers.append(number)
        for column in ("cpu_milli", "memory_mib"):
            ints[column].append(_int(path, number, column, row[at[column]]))
        count = _int(path, number, "num_gpu", row[at["num_gpu"]])
        share = min(_int(path, number, "gpu_milli", row[at["gpu_milli"]], blank=0), GPU_MILLI)
        if count == 0:
            share = 0
        elif share == 0:
            raise OpenbFormatError(f"{path}:{number}: a pod with {count} GPUs needs gpu_milli > 0")
        elif count > 1 and share < GPU_MILLI:
            raise OpenbFormatError(
                f"{path}:{number}: a pod with {count} GPUs must take whole GPUs "
                f"(gpu_milli {share} < {GPU_MILLI})"
            )
        ints["num_gpu"].append(count)
        ints["gpu_milli"].append(share)
        spec = tuple(m.strip() for m in text(row, "gpu_spec").split("|") if m.strip())
        specs.append(spec if count else ())
        qos.append(text(row, "qos"))
        phase.append(text(row, "pod_phase"))
        for column in POD_OPTIONAL[3:]:
            ints[column].append(_int(path, number, column, text(row, column), blank=-1))
    _unique(path, names, numbers, "pod")

    def array(column: str) -> IntArray:
        return np.array(ints[column], dtype=np.int64)

    return OpenbPods(
        path,
        tuple(names),
        array("cpu_milli"),
        array("memory_mib"),
        array("num_gpu"),
        array("gpu_milli"),
        tuple(specs),
        tuple(qos),
        tuple(phase),
        array("creation_time"),
        array("deletion_time"),
        array("scheduled_time"),
    )
