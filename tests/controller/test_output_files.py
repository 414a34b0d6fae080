"""Where a batch job's output files go: Slurm's filename patterns expanded for the job's start
and resolved against its working directory (controller/output_files.py, pure)."""

from __future__ import annotations

from typing import Any

import pytest

from fusesched.controller.output_files import batch_dirs, batch_outputs, resolve
from fusesched.output_patterns import NO_ARRAY_INDEX, expand
from fusesched.submit.sbatch import parse_sbatch

MEMBER: dict[str, Any] = {
    "job_id": "12_7",
    "array_job": "12",
    "array_index": 7,
    "user": "ann",
    "name": "sweep",
    "node": "gpu-3.lab.org",
}
PLAIN: dict[str, Any] = MEMBER | {"job_id": "40", "array_job": None, "array_index": None}


@pytest.mark.parametrize(
    ("pattern", "names", "expanded"),
    [
        ("slurm-%j.out", PLAIN, "slurm-40.out"),
        ("slurm-%A_%a.out", MEMBER, "slurm-12_7.out"),
        ("%x-%u-%N-%n-%t-%s-%J.log", PLAIN, "sweep-ann-gpu-3-0-0-batch-40.batch.log"),
        ("out-%4a-%b.txt", MEMBER, "out-0007-7.txt"),
        ("%A-%a", PLAIN, f"40-{NO_ARRAY_INDEX}"),
        ("100%% done %j", PLAIN, "100% done 40"),
        ("keep %q and %", PLAIN, "keep %q and %"),  # (unknown sequences stay as written)
        ("%5j", PLAIN, "00040"),
        ("%%%j%", PLAIN, "%40%"),
        ("%5%-%٣j-%-1j", PLAIN, "%-%٣j-%-1j"),  # (only ASCII digits make a width)
        ("%x", PLAIN | {"name": "a/../b"}, "a/../b"),  # (as Slurm: the name as it is)
        ("%9999999999999999999a", MEMBER, "7".zfill(64)),
        ("é-%u", PLAIN, "é-ann"),
    ],
)
def test_expand(pattern: str, names: dict[str, Any], expanded: str) -> None:
    assert expand(pattern, **names) == expanded


def test_resolve() -> None:
    assert resolve("/data/out.txt", None) == "/data/out.txt"
    # (not normalised: the kernel resolves ``..`` after a link to the link target's parent)
    assert resolve("logs/../out.txt", "/home/ann/run") == "/home/ann/run/logs/../out.txt"
    assert resolve("/a/.", None) == "/a/." and resolve("/.", None) is None
    # relative, without an absolute working directory: in the task's own folder, not written
    assert resolve("out.txt", None) is None and resolve("out.txt", "sub") is None
    assert resolve("/" + "x" * 5000, None) is None and resolve("/", None) is None


def test_batch_outputs() -> None:
    named = dict(PLAIN)
    assert batch_outputs("o-%j", None, "/w", **named) == ("/w/o-40", None)
    assert batch_outputs("o-%j", "e-%j", "/w", **named) == ("/w/o-40", "/w/e-40")
    assert batch_outputs("/w/o", "o", "/w", **named) == ("/w/o", None)
    assert batch_outputs("o-%j", "/e", None, **named) == (None, None)
    assert batch_outputs(None, "/e", "/w", **named) == (None, None)
    # the same file, written differently: standard error goes with the output
    assert batch_outputs("o", "./o", "/w", **named) == ("/w/o", None)


@pytest.mark.parametrize(
    ("args", "submit_dir", "dirs"),
    [
        ([], "/home/ann", (None, "/home/ann")),  # where sbatch ran, if the node has it
        (["-D", "run"], "/home/ann", ("/home/ann/run", None)),  # relative to it (Slurm)
        (["-D", "/scratch"], "/home/ann", ("/scratch", None)),
        (["-D", "run"], None, ("run", None)),  # (a client older than submit_dir)
        ([], None, (None, None)),
    ],
)
def test_batch_dirs(args: list[str], submit_dir: str | None, dirs: tuple[str | None, ...]) -> None:
    request = parse_sbatch("#!/bin/sh\n", args=args, submit_dir=submit_dir).request
    assert batch_dirs(request) == dirs
