"""What a Kubernetes job's objects say about it: its :class:`RemoteStatus`.

The verdict (state, reason, timed out, end time) comes from the object that runs the job (a
``batch/v1`` Job, a Pod, a Volcano Job, or a PodGroup's pods); the exit code, start and end
times, nodes and OOM kill from the pods' containers. :mod:`fusesched.backends.kubernetes` reads
the objects and hands them here.

States:

=================================================  ==============================================
Kubernetes                                         RemoteState
=================================================  ==============================================
Job condition Complete / Failed (FailureTarget)    SUCCEEDED / FAILED (DeadlineExceeded: timed_out)
Job, no condition                                  RUNNING when a pod runs, else PENDING
Pod phase Pending / Running, Unknown               PENDING / RUNNING
Pod phase Succeeded / Failed                       SUCCEEDED / FAILED
Volcano Pending, Inqueue, Restarting               PENDING
Volcano Running, Completing, Aborting, Terminating RUNNING (pods still hold the nodes)
Volcano Completed                                  SUCCEEDED
Volcano Failed, Aborted, Terminated                FAILED
PodGroup                                           from its pods: any Failed → FAILED, all
                                                   Succeeded → SUCCEEDED, any running → RUNNING
object gone (404)                                  left out (the caller treats it as LOST)
=================================================  ==============================================

A failed job one of whose failed pods its node took down is ``node_failed`` (the controller
answers it as a node failure, Slurm's NODE_FAIL: :func:`node_lost`): the pod evicted (its
reason ``Evicted``, the kubelet under node pressure), its node lost or shut down
(``NodeLost``, ``NodeShutdown``, ``Shutdown``), or its ``DisruptionTarget`` condition saying
its node's taint, the pod garbage collector (its node deleted) or the kubelet ended it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Final

from kubernetes import client

from fusesched.backends import kube_objects as ko
from fusesched.backends.base import RemoteState, RemoteStatus

_VOLCANO_STATES: Final[Mapping[str, RemoteState]] = {
    **dict.fromkeys(("Pending", "Inqueue", "Restarting"), RemoteState.PENDING),
    # still holding the nodes while pods finish or are killed
    **dict.fromkeys(("Running", "Completing", "Aborting", "Terminating"), RemoteState.RUNNING),
    "Completed": RemoteState.SUCCEEDED,
    **dict.fromkeys(("Failed", "Aborted", "Terminated"), RemoteState.FAILED),
}
_POD_STATES: Final[Mapping[str, RemoteState]] = {
    "Pending": RemoteState.PENDING,
    "Running": RemoteState.RUNNING,
    "Unknown": RemoteState.RUNNING,  # the node stopped reporting; not yet a verdict
    "Succeeded": RemoteState.SUCCEEDED,
    "Failed": RemoteState.FAILED,
}
_DEADLINE: Final = "DeadlineExceeded"
#: A pod's own reason when its node ended it (evicted under pressure, lost, shut down).
_NODE_REASONS: Final = frozenset({"Evicted", "NodeLost", "NodeShutdown", "Shutdown"})
#: The reasons of a pod's ``DisruptionTarget`` condition that blame its node: not a
#: preemption by the scheduler, nor an eviction through the API (a drain, asked for).
_NODE_DISRUPTIONS: Final = frozenset(
    {"DeletionByTaintManager", "DeletionByPodGC", "TerminationByKubelet"}
)


def _epoch(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


_Verdict = tuple[RemoteState, str, bool, float | None]  # state, reason, timed out, end time


def _container_state(pod: client.V1Pod) -> client.V1ContainerState | None:
    for status in (pod.status.container_statuses or []) if pod.status else []:
        if status.name == ko.CONTAINER:
            return status.state
    return None


def _pod_reason(pod: client.V1Pod) -> str:
    """The most telling words about a pod: its own reason, else its container's."""
    status = pod.status or client.V1PodStatus()
    if status.reason or status.message:
        return ": ".join(x for x in (status.reason, status.message) if x)
    state = _container_state(pod)
    detail = None if state is None else (state.terminated or state.waiting)
    if detail is not None and (detail.reason or detail.message):
        return ": ".join(x for x in (detail.reason, detail.message) if x)
    return ""


def node_lost(pod: client.V1Pod) -> bool:
    """Whether ``pod`` failed because its node did (evicted, node lost or shut down)."""
    status = pod.status
    if status is None or status.phase != "Failed":
        return False
    if status.reason in _NODE_REASONS:
        return True
    return any(
        c.type == "DisruptionTarget" and c.status == "True" and c.reason in _NODE_DISRUPTIONS
        for c in status.conditions or []
    )


def _timed_out(pods: Sequence[client.V1Pod]) -> bool:
    return any(p.status is not None and p.status.reason == _DEADLINE for p in pods)


def pod_verdict(pods: Sequence[client.V1Pod]) -> _Verdict:
    """Several pods (a PodGroup) fail with the first failure and succeed only all together."""
    states = [
        _POD_STATES.get((p.status.phase if p.status else None) or "", RemoteState.PENDING)
        for p in pods
    ]
    failed = [p for p, s in zip(pods, states, strict=True) if s == RemoteState.FAILED]
    if failed:
        state = RemoteState.FAILED
    elif all(s == RemoteState.SUCCEEDED for s in states):
        state = RemoteState.SUCCEEDED
    elif any(s != RemoteState.PENDING for s in states):
        state = RemoteState.RUNNING
    else:
        state = RemoteState.PENDING
    reason = next((r for p in (failed or pods) if (r := _pod_reason(p))), "")
    return state, reason, _timed_out(pods), None


def job_verdict(job: client.V1Job, pods: Sequence[client.V1Pod]) -> _Verdict:
    status = job.status or client.V1JobStatus()
    for cond in status.conditions or []:
        if cond.status != "True" or cond.type not in ("Complete", "Failed", "FailureTarget"):
            continue
        state = RemoteState.SUCCEEDED if cond.type == "Complete" else RemoteState.FAILED
        reason = ": ".join(x for x in (cond.reason, cond.message) if x)
        end = _epoch(status.completion_time) or _epoch(cond.last_transition_time)
        return state, reason, cond.reason == _DEADLINE or _timed_out(pods), end
    state, reason, _, _ = pod_verdict(pods) if pods else (RemoteState.PENDING, "", False, None)
    # a pod's own end is not the Job's: until a condition says so, it has not ended
    return (RemoteState.RUNNING if state.terminal else state), reason, False, None


def volcano_verdict(obj: object, pods: Sequence[client.V1Pod]) -> _Verdict:
    status = obj.get("status") if isinstance(obj, dict) else None
    phase_info = status.get("state") if isinstance(status, dict) else None
    info = phase_info if isinstance(phase_info, dict) else {}
    phase = str(info.get("phase") or "Pending")
    state = _VOLCANO_STATES.get(phase, RemoteState.PENDING)
    words = ": ".join(str(x) for x in (info.get("reason"), info.get("message")) if x)
    if state == RemoteState.FAILED:
        words = next(
            (r for p in pods if pod_verdict([p])[0].terminal and (r := _pod_reason(p))), words
        )
    return (
        state,
        words or ("" if phase in _VOLCANO_STATES else f"Volcano phase {phase}"),
        _timed_out(pods),
        None,
    )


def remote_status(
    external_id: str,
    state: RemoteState,
    reason: str,
    timed_out: bool,
    end: float | None,
    pods: Sequence[client.V1Pod],
) -> RemoteStatus:
    """Exit code, times and nodes come from the pods' containers."""
    starts: list[float] = []
    ends: list[float] = []
    codes: list[int] = []
    oom = False
    for pod in pods:
        state_now = _container_state(pod)
        if state_now is not None and state_now.running is not None:
            starts += [t for t in [_epoch(state_now.running.started_at)] if t is not None]
        if state_now is not None and state_now.terminated is not None:
            done = state_now.terminated
            codes.append(done.exit_code)
            oom = oom or done.reason == "OOMKilled"  # (the kubelet's word for the OOM killer)
            starts += [t for t in [_epoch(done.started_at)] if t is not None]
            ends += [t for t in [_epoch(done.finished_at)] if t is not None]
    exit_code = None
    if state.terminal and codes:
        exit_code = next((c for c in codes if c != 0), 0)
    if state.terminal and end is None and ends:
        end = max(ends)
    nodes = tuple(dict.fromkeys(p.spec.node_name for p in pods if p.spec and p.spec.node_name))
    return RemoteStatus(
        external_id,
        state,
        exit_code=exit_code,
        reason=reason,
        start_time=min(starts) if starts else None,
        end_time=end if state.terminal else None,
        nodes=nodes,
        timed_out=timed_out,
        node_failed=state is RemoteState.FAILED and any(node_lost(p) for p in pods),
        out_of_memory=oom and state is RemoteState.FAILED,
    )
