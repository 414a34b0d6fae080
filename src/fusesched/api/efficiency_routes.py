"""``GET /v1/jobs/{id}/efficiency``: what a job used against what it asked for (Slurm's
``seff``; :mod:`fusesched.api.efficiency` computes it)."""

from __future__ import annotations

from fastapi import FastAPI, HTTPException

from fusesched.api.access import Access, Caller
from fusesched.api.efficiency import JobEfficiency, job_efficiency
from fusesched.controller.task_usage import live_usage


def add_efficiency_routes(app: FastAPI, access: Access) -> None:
    """Serve ``/v1/jobs/{job_id}/efficiency`` from ``app``."""
    controller = access.controller

    @app.get("/v1/jobs/{job_id}/efficiency", response_model=JobEfficiency, tags=["jobs"])
    def efficiency(job_id: str, p: Caller) -> JobEfficiency:
        """The job's CPU, memory and GPU use against its allocation: CPU time ÷ (elapsed ×
        CPUs), peak memory ÷ memory requested, mean GPU utilisation and peak GPU memory, per
        job and per task. Running tasks report their values so far; what was not sampled is
        null, and ``notes`` says why. Visible to whoever may see the job."""
        access.visible_job(p, job_id)  # 404 for a job that does not exist or is not theirs
        live = live_usage(controller, job_id)  # before the store: see live_usage
        detail = controller.persist.store.get_job(job_id)
        if detail is None:  # deleted in between
            raise HTTPException(404, f"no job {job_id!r}")
        return job_efficiency(detail, live, controller.clock(), set(controller.pools))
