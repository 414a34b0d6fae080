"""Slurm's COMPLETING in the live shell: a job whose run ends while tasks of it still run on
some of its nodes (a job step's task, an orted: the controller kills them as the job ends,
and one that ignores SIGTERM lives on until the grace is over) keeps its booking on those
nodes, its CPUs, memory and GPUs there, until each such task is gone, so that no new job is
placed on them meanwhile. The job itself has ended as always: its state, exit and end time
are its end's, and what it held on its other nodes, its quota and its licenses are free at
once. Those tasks keep their own CPU ids out of their node's pool until then
(controller/late_exits.py).

The run's ``JobExited`` names the nodes where its tasks still run (late_exits.nodes_left); the
core keeps its booking there (core/completing.py). Before each cycle, :func:`settle` frees
the nodes where none of them runs any more: each has reported its exit, or was written lost
(its agent lists it no more or restarted, its node fell silent, too many tasks outlived
their jobs). A node held longer than ``completing_timeout_s`` is freed anyway (a process
that does not die even when SIGKILLed), said in the job's events.

A restarted controller's core knows nothing of the jobs that ended before it: a node where
tasks of theirs still die (late_exits.node_back) is kept ``DRAINING`` until they are gone,
as a node of a job waiting for adoption is (controller/adoption.py).

Every function here runs with the controller's lock held.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fusesched.controller import adoption, late_exits
from fusesched.model.events import CompletingEnded

if TYPE_CHECKING:
    from fusesched.controller.service import Controller

#: Why a node held past ``completing_timeout_s`` is freed (a job event).
GAVE_UP = "CompletingTimeout"


def settle(ctl: Controller, now: float) -> None:
    """Before a cycle: the nodes ended runs still hold where none of their tasks runs any
    more, or held past the time-out, are freed (``CompletingEnded``); so are the nodes kept
    draining after a restart where no task of before it runs any more."""
    if ctl.adopt_held:
        adoption.release_held_nodes(ctl, now)
    held = ctl.core.completing
    if not held:
        return
    running = {(t.launch.job_id, t.node) for t in ctl.outliving.values()}
    for job_id in held:
        live = ctl.jobs.get(job_id)
        if live is not None and live.exit_sent:  # (its run not forgotten yet)
            running.update(
                (job_id, t.node) for t in live.tasks.values() if late_exits.outlives(ctl, t)
            )
    names = ctl.core.cluster.names
    timeout = ctl.config.completing_timeout_s
    for job_id, rows in held.items():
        done: list[str] = []
        for row, entry in rows.items():
            node = names[row]
            if (job_id, node) not in running:
                done.append(node)
            elif now - entry.since >= timeout:
                done.append(node)
                why = f"tasks of it still run on {node} {timeout:g} s after its end: freed anyway"
                ctl.persist.job_event(job_id, GAVE_UP, why, now)
        if done:
            ctl.events.append(CompletingEnded(job_id, tuple(done)))
