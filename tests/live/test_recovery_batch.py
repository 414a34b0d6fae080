"""A batch job over two nodes (``sbatch -N 2``) through a controller crash: the restarted
controller adopts it on both its nodes (rebuilt from the hostfile the script's agent
reports), so ``srun -N 2`` in its script reaches the other node afterwards."""

from __future__ import annotations

from pathlib import Path

from .test_recovery import Crashable, crashable, wait_for

__all__ = ["crashable"]  # (the fixture, for this module's tests)


def test_srun_reaches_every_node_of_a_batch_job_adopted_after_a_crash(
    crashable: Crashable, scratch: Path
) -> None:
    client = crashable.client
    marker = scratch / "go"
    script = (
        "#!/bin/bash\n#SBATCH -N 2 -n 2 -c 1 --mem=64M -t 2\n"
        f"while [ ! -e {marker} ]; do sleep 0.1; done\n"
        "srun -N 2 sh -c 'echo step on $SLURMD_NODENAME'\necho srun=$?\n"
    )
    (job,) = client.submit_files([{"name": "two.sh", "text": script}])["ids"]
    wait_for("it to run", lambda: client.show(job)["state"] == "Running")

    crashable.kill_controller()
    crashable.start_controller()
    both = [("node-a", "up"), ("node-b", "up")]  # (each kept draining until it is adopted)
    wait_for(
        "it to be adopted", lambda: sorted((n["name"], n["state"]) for n in client.nodes()) == both
    )
    assert sorted(client.show(job)["nodes"]) == ["node-a", "node-b"]
    marker.touch()

    done = client.wait(job, timeout=60)
    output = client.logs(job)
    assert done["state"] == "Completed", output
    lines = output.splitlines()
    assert sorted(x for x in lines if x.startswith("step on")) == [
        "step on node-a",
        "step on node-b",
    ], output
    assert "srun=0" in lines, output
