"""Datasets in the live controller: what agents cache goes to the core, what a task reads goes
to its agent, and data for a reserved job is staged onto the nodes it will probably get.

Agents list the datasets their cache holds complete in each full heartbeat; a change becomes a
``NodeDatasets`` event for the core (placement prefers nodes holding a job's data, see
:mod:`fusesched.core.datasets`). When the core reserves nodes for a blocked job that declares
datasets (``ReserveJob.nodes``), each of those nodes that does not hold them yet is asked once
to stage them ahead (``HeartbeatReply.stage``), so the job finds them local when it starts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from fusesched.api.wire import DatasetWire, Heartbeat
from fusesched.model.events import NodeDatasets, ReserveJob
from fusesched.model.job import Dataset

if TYPE_CHECKING:
    from fusesched.controller.service import Controller

#: A stage request the node has not acted on (lost reply, failed copy) is sent again after this.
STAGE_RETRY_S = 300.0


def dataset_wires(datasets: Iterable[Dataset]) -> list[DatasetWire]:
    return [DatasetWire(name=d.name, source=d.source, size_bytes=d.size_bytes) for d in datasets]


def heard(ctl: Controller, beat: Heartbeat) -> None:
    """A full beat listed the node's cached datasets: tell the core when the set changed."""
    if beat.datasets is None:
        return
    node = ctl.nodes[beat.node]
    held = frozenset(beat.datasets)
    if held == node.datasets:
        return
    node.datasets = held
    for name in held:  # staged
        node.staging.pop(name, None)
    ctl.events.append(NodeDatasets(beat.node, held))
    ctl.wake()


def stage_for(ctl: Controller, decision: ReserveJob) -> None:
    """Ask the reserved nodes to stage the job's datasets they do not hold yet — once, or
    again when :data:`STAGE_RETRY_S` has passed without the node reporting it held."""
    live = ctl.jobs.get(decision.job_id)
    if live is None or not live.spec.datasets or not decision.nodes:
        return
    now = ctl.clock()
    for name in decision.nodes:
        node = ctl.nodes.get(name)
        if node is None or node.datasets is None:  # an external pool's, or no cache there
            continue
        missing = [
            d
            for d in live.spec.datasets
            if d.name not in node.datasets
            and now - node.staging.get(d.name, -STAGE_RETRY_S) >= STAGE_RETRY_S
        ]
        node.stage.extend(dataset_wires(missing))
        node.staging.update((d.name, now) for d in missing)
