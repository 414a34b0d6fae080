"""Job steps' own CPUs and memory against a live controller and a real agent: two
concurrent one-task ``srun -c N`` steps in a ``-n 2 -c N`` job run pinned to disjoint CPU
sets (the kernel's ``Cpus_allowed_list``), a third waits for them, and ``srun --mem`` is
its task's memory limit (its cgroup's, where this machine lets the agent make one)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from fusesched.agent.cgroups import MemoryCgroups
from fusesched.agent.config import AgentConfig
from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

from .conftest import local_cluster

#: CPUs per task: 2 where this machine has 4 to pin to, else 1 (node-a gets 2 of each).
CPUS = 2 if len(os.sched_getaffinity(0)) >= 4 else 1

SCRIPT = r"""#!/bin/bash
#SBATCH -n 2 -c @C --nodelist=node-a --mem-per-cpu=128M
#SBATCH -t 2
S=@S
for i in 0 1; do
  srun -n1 -c @C sh -c "echo step $i \$(grep Cpus_allowed_list /proc/self/status) \
    on=\$SLURM_CPUS_ON_NODE ids=\$FUSESCHED_CPU_IDS; touch $S/s.$i
    while [ ! -e $S/go ]; do sleep 0.05; done" &
done
until [ -e $S/s.0 ] && [ -e $S/s.1 ]; do sleep 0.05; done
srun -n1 -c @C -J third sh -c 'echo third' 2>$S/third &
until grep -qs retrying $S/third; do sleep 0.05; done  # (it waits, however slow its start)
touch $S/go
wait
cat $S/third >&2
srun -n1 -c 1 --mem=100M sh -c 'G=/sys/fs/cgroup/memory$(grep :memory: /proc/self/cgroup |
  cut -d: -f3); echo "mem=$FUSESCHED_MEMORY_LIMIT_BYTES cgroup=$(cat $G/memory.limit_in_bytes)"'
srun -n1 --mem=2G true
echo "too much: $?"
"""


def node_a(configs: list[AgentConfig]) -> Sequence[AgentConfig]:
    return [c.model_copy(update={"cpu": 2 * CPUS}) for c in configs if c.name == "node-a"]


@pytest.fixture
def cpu_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path / "data", node_a) as cluster:
        yield cluster


def cpu_set(text: str) -> set[int]:
    """The CPUs a ``Cpus_allowed_list`` (``0-1,4``) names."""
    out: set[int] = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        out.update(range(int(low), int(high or low) + 1))
    return out


def test_steps_run_on_cpus_of_their_own(cpu_cluster: LocalCluster, scratch: Path) -> None:
    client = Client(cpu_cluster.url)
    script = SCRIPT.replace("@C", str(CPUS)).replace("@S", str(scratch))
    (job,) = client.submit_files([{"name": "pinned.sh", "text": script}])["ids"]
    done = client.wait(job, timeout=150)
    output = client.logs(job)
    assert done["state"] == "Completed", output
    lines = output.splitlines()
    steps = sorted(line.split() for line in lines if line.startswith("step "))
    assert len(steps) == 2, output
    sets = [cpu_set(words[3]) for words in steps]  # step I Cpus_allowed_list: SET on= ids=
    assert all(len(s) == CPUS for s in sets) and not sets[0] & sets[1], output
    assert all(words[4] == f"on={CPUS}" for words in steps), output
    assert [cpu_set(words[5][4:]) for words in steps] == sets, output  # FUSESCHED_CPU_IDS
    said = [line for line in lines if line.startswith("srun: ")]
    assert any(
        line.startswith(f"srun: Job {job} step creation temporarily disabled, retrying")
        for line in said
    ), output  # the third waited
    assert "third" in lines, output
    (mem,) = [line for line in lines if line.startswith("mem=")]
    limit = str(100 * 2**20)
    if MemoryCgroups.detect().available:
        assert mem == f"mem={limit} cgroup={limit}", output
    else:
        assert mem.startswith("mem= cgroup="), output  # (no cgroup: not enforced, not said)
    assert "too much: 1" in lines, output  # the job has 256M there: never fits
    assert any("asks for 2048M of memory on node-a; the job has" in line for line in said)
