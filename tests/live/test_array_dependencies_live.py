"""Map–reduce with real agents and real processes, as a Slurm user writes it: an array, a
reducer ``--dependency=afterok:<array>`` that starts only once every member completed, and a
second array ``--dependency=aftercorr:<array>`` whose member i starts once member i of the
first completed (not the whole array)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.live.test_cli import PYTHON
from tests.live.test_cli_sbatch_options import run_in

from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

MAP = """\
#!/bin/sh
n=0  # (until every job is submitted: the command line takes a while to start)
while [ ! -e {dir}/go ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n + 1)); done
sleep $((SLURM_ARRAY_TASK_ID - 1))  # map_1 at once, map_3 two seconds later
echo "map $SLURM_ARRAY_TASK_ID" > {dir}/map_$SLURM_ARRAY_TASK_ID
"""
REDUCE = """\
#!/bin/sh
cat {dir}/map_* > {dir}/reduced
"""
POST = """\
#!/bin/sh
cat {dir}/map_$SLURM_ARRAY_TASK_ID > {dir}/post_$SLURM_ARRAY_TASK_ID
"""


def parsable(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().split(";")[0]


def test_afterok_on_an_array_and_aftercorr(
    cluster: LocalCluster, scratch: Path, tmp_path: Path
) -> None:
    for name, text in (("map.sh", MAP), ("reduce.sh", REDUCE), ("post.sh", POST)):
        (tmp_path / name).write_text(text.format(dir=scratch))

    def sbatch(*args: str) -> str:
        return parsable(run_in(tmp_path, cluster, PYTHON, "sbatch", "--parsable", *args))

    jid = sbatch("--array=1-3", "-c", "1", "map.sh")
    reducer = sbatch(f"--dependency=afterok:{jid}", "-c", "1", "reduce.sh")
    post = sbatch("--array=1-3", f"--dependency=aftercorr:{jid}", "-c", "1", "post.sh")
    (scratch / "go").touch()

    client = Client(cluster.url)
    done = {j: client.wait(j, timeout=60) for j in [reducer] + [f"{post}_{i}" for i in (1, 2, 3)]}
    assert {j: d["state"] for j, d in done.items()} == dict.fromkeys(done, "Completed")
    maps = {i: client.show(f"{jid}_{i}") for i in (1, 2, 3)}
    assert all(m["state"] == "Completed" for m in maps.values())
    # the reducer ran after every member, and saw all their outputs
    assert done[reducer]["start_time"] >= max(m["end_time"] for m in maps.values())
    assert sorted((scratch / "reduced").read_text().split("\n")[:-1]) == [
        "map 1",
        "map 2",
        "map 3",
    ]
    # post_i ran after map_i — post_1 before map_3 ended: paired, not on the whole array
    for i in (1, 2, 3):
        assert done[f"{post}_{i}"]["start_time"] >= maps[i]["end_time"]
        assert (scratch / f"post_{i}").read_text() == f"map {i}\n"
    assert done[f"{post}_1"]["start_time"] < maps[3]["end_time"]
