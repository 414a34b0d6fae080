"""``srun --pty`` under ``fusesched salloc`` asks for its CPUs and memory as any step, against
a live controller and a real agent: with ``-c 1 --mem=32M`` in an allocation of 2 CPUs, its
task is pinned to one CPU id of its own and told its memory (agent/step_pty.py)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tests.live.conftest import local_cluster
from tests.live.test_run_pty_live import Typist

PYTHON = [sys.executable, "-m", "fusesched"]
SHOW = "echo ids=$FUSESCHED_CPU_IDS mem=$SLURM_MEM_PER_NODE end; exit 3"


def test_srun_pty_takes_its_cpus_and_memory(tmp_path: Path) -> None:
    with local_cluster(tmp_path / "data", lambda a: a[1:2]) as cluster:  # (node-b: 2 CPUs)
        salloc = [*PYTHON, "salloc", "-Q", "-n", "1", "-c", "2", "--mem=128M", "-t", "2"]
        step = ["srun", "--pty", "-c", "1", "--mem=32M", "sh", "-c", SHOW]
        typist = Typist(cluster, command=[*salloc, *step])
        try:
            code, shown = typist.finish(90)
        finally:
            typist.kill()
    found = re.search(rb"ids=(\S*) mem=(\S*) end", shown)
    assert code == 3 and found is not None, shown
    assert re.fullmatch(rb"\d+", found[1]) and found[2] == b"32", shown
