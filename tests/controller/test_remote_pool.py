"""The worker that runs an external pool's back end for the controller (controller/remote.py).

A scripted back end stands in for the cluster here so every path can be forced (refusals,
outages, a job the cluster forgets); the real back ends run in tests/live/test_slurm_pool.py
(Slurm) and tests/backends/test_kubernetes.py (the Kubernetes client flow).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from fusesched.backends.base import (
    BackendRejected,
    BackendUnavailable,
    RemoteJob,
    RemoteNode,
    RemotePlacement,
    RemoteState,
    RemoteStatus,
)
from fusesched.controller.remote import MISSING_POLLS, RemotePool, Update
from fusesched.model.resources import CPU, Resources
from fusesched.submit.request import JobRequest


@dataclass
class Scripted:
    """A cluster whose answers the test sets."""

    kind: str = "scripted"
    reachable: bool = True
    refuse: str | None = None
    states: dict[str, RemoteStatus] = field(default_factory=dict)
    output: dict[str, bytes] = field(default_factory=dict)
    submitted: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)

    def _check(self) -> None:
        if not self.reachable:
            raise BackendUnavailable("connection refused")

    def nodes(self) -> Sequence[RemoteNode]:
        self._check()
        return [RemoteNode("n1", Resources({CPU: 4000}))]

    def submit(self, job: RemoteJob) -> str:
        self._check()
        if self.refuse:
            raise BackendRejected(self.refuse)
        external = str(100 + len(self.submitted))
        self.submitted.append(external)
        self.states[external] = RemoteStatus(external, RemoteState.PENDING, reason="queued")
        return external

    def cancel(self, external_id: str) -> None:
        self._check()
        self.cancelled.append(external_id)

    def poll(self, external_ids: Sequence[str]) -> Sequence[RemoteStatus]:
        self._check()
        return [self.states[i] for i in external_ids if i in self.states]

    def release(self, external_id: str) -> None:
        self.released.append(external_id)

    def logs(self, external_id: str, job: RemoteJob) -> Mapping[str, bytes]:
        return {"stdout": self.output.get(external_id, b"")}


class Collected:
    def __init__(self) -> None:
        self.updates: list[Update] = []
        self.lock = threading.Lock()

    def __call__(self, updates: list[Update]) -> None:
        with self.lock:
            self.updates.extend(updates)

    def wait(self, kind: str, count: int = 1, timeout: float = 5.0) -> list[Update]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                found = [u for u in self.updates if u.kind == kind]
            if len(found) >= count:
                return found
            time.sleep(0.01)
        raise AssertionError(f"no {count} {kind!r} update(s) in {self.updates}")


def remote_job() -> RemoteJob:
    request = JobRequest.model_validate({"groups": [{"resources": {"cpu": 1}, "argv": ["true"]}]})
    return RemoteJob("7", request, (RemotePlacement("main", {"n1": 1}, Resources({CPU: 1000})),))


def pool(cluster: Scripted, got: Collected) -> RemotePool:
    worker = RemotePool("p", cluster, got, poll_s=0.02, nodes_s=0.05)
    worker.start()
    return worker


def test_submit_follow_and_release() -> None:
    cluster, got = Scripted(), Collected()
    worker = pool(cluster, got)
    try:
        assert got.wait("nodes")[0].nodes[0].name == "n1"
        worker.submit("7.main.0", remote_job())
        assert got.wait("submitted")[0].external_id == "100"
        assert got.wait("status")[0].status.state is RemoteState.PENDING  # type: ignore[union-attr]
        cluster.output["100"] = b"hello\n"
        cluster.states["100"] = RemoteStatus("100", RemoteState.SUCCEEDED, exit_code=0)
        logs = got.wait("logs", 2)
        assert logs[-1].data["stdout"] == b"hello\n"
        final = got.wait("status", 2)[-1].status
        assert final is not None and final.state is RemoteState.SUCCEEDED
        deadline = time.monotonic() + 2
        while not cluster.released and time.monotonic() < deadline:
            time.sleep(0.01)
        assert cluster.released == ["100"]
    finally:
        worker.stop()


def test_refused_job_fails_and_unreachable_cluster_requeues() -> None:
    cluster, got = Scripted(refuse="Invalid partition name specified"), Collected()
    worker = pool(cluster, got)
    try:
        worker.submit("7.main.0", remote_job())
        failed = got.wait("failed")[0]
        assert not failed.requeue and "Invalid partition" in failed.reason
        cluster.refuse, cluster.reachable = None, False
        worker.submit("8.main.0", remote_job())
        again = got.wait("failed", 2)[1]
        assert again.requeue and "unreachable at submission" in again.reason
        assert got.wait("down")[0].reason == "connection refused"
        assert not worker.reachable
        cluster.reachable = True
        worker.refresh_nodes()
        got.wait("nodes", 2)
        assert worker.reachable
    finally:
        worker.stop()


def test_a_forgotten_job_is_reported_lost() -> None:
    cluster, got = Scripted(), Collected()
    worker = pool(cluster, got)
    try:
        worker.submit("7.main.0", remote_job())
        got.wait("submitted")
        del cluster.states["100"]
        final = got.wait("status")[-1].status
        assert final is not None and final.state is RemoteState.LOST
        assert "no longer knows job 100" in final.reason and MISSING_POLLS >= 2
    finally:
        worker.stop()


def test_cancel_waits_for_the_cluster() -> None:
    cluster, got = Scripted(), Collected()
    worker = pool(cluster, got)
    try:
        worker.submit("7.main.0", remote_job())
        got.wait("submitted")
        cluster.reachable = False
        tries = 0
        original = cluster.cancel

        def counted(external_id: str) -> None:
            nonlocal tries
            tries += 1
            original(external_id)

        cluster.cancel = counted  # type: ignore[method-assign]
        worker.cancel("7.main.0")
        time.sleep(0.3)
        assert cluster.cancelled == [] and 1 <= tries <= 30  # once a poll, not in a busy loop
        cluster.reachable = True
        deadline = time.monotonic() + 3
        while not cluster.cancelled and time.monotonic() < deadline:
            time.sleep(0.02)
        assert cluster.cancelled == ["100"]
    finally:
        worker.stop()
