"""The SWF workload builds its jobs' specs by position: they must be what keywords give."""

from __future__ import annotations

from pathlib import Path

from fusesched.model.job import JobSpec, JobType
from fusesched.sim.workload import swf_workload
from fusesched.traces.swf import load_swf

# job submit wait run alloc cpu mem req_procs req_time req_mem status user group exe queue
# partition preceding think
RECORDS = """; MaxNodes: 4
; MaxProcs: 8
1 0 5 100 2 -1 -1 2 300 -1 1 7 1 1 2 1 -1 -1
2 10 0 50 -1 -1 -1 4 -1 -1 1 -1 1 1 -1 1 -1 -1
3 20 0 -1 1 -1 -1 1 60 -1 1 3 1 1 0 1 -1 -1
"""


def test_specs_by_position_equal_specs_by_keyword(tmp_path: Path) -> None:
    path = tmp_path / "tiny.swf"
    path.write_text(RECORDS)
    workload = swf_workload(load_swf(path))
    assert [j.spec.id for j in workload.jobs] == ["1", "2", "3"]
    for job in workload.jobs:
        spec = job.spec
        by_keyword = JobSpec(
            id=spec.id,
            task_groups=spec.task_groups,
            type=JobType.HPC,
            queue=spec.queue,
            user=spec.user,
            walltime_s=spec.walltime_s,
            submit_time=spec.submit_time,
        )
        assert spec == by_keyword
    first, second, third = (j.spec for j in workload.jobs)
    assert (first.queue, first.user, first.walltime_s, first.submit_time) == ("q2", "7", 300.0, 0.0)
    assert (second.queue, second.user, second.walltime_s) == ("default", "", 50.0)
    assert third.task_groups[0].replicas == 1 and workload.jobs[2].runtime == 10.0
