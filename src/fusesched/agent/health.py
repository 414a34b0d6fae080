"""Node health: a configured health-check program (as Slurm's HealthCheckProgram) and GPUs.

* :class:`HealthCheckProgram` runs an argv list (never a shell line) in its own session with a
  timeout; a non-zero exit, a timeout or a program that cannot start makes the node
  unhealthy, with the program's (truncated) output as the reason. ``maybe_run(now)`` runs it
  when ``interval_s`` has passed since the last run, so the agent can call it every beat.
* :func:`gpu_health` turns GPU samples into reasons: a lost GPU, an uncorrectable ECC error
  count above the threshold, or a *node-fatal* XID (the table :data:`XIDS` says which XIDs
  mean the hardware needs a reset or a drain and which are usually the application's fault).
* :func:`node_health` combines both into :class:`NodeHealth`.

The agent reports ``NodeHealth`` with its heartbeat; the controller drains an unhealthy node
(see docs/FAILURES.md). Nothing here drains anything.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from fusesched.agent.sensors import GpuSample

MAX_REASON_CHARS = 500


@dataclass(frozen=True, slots=True)
class Xid:
    code: int
    meaning: str
    node_fatal: bool  # the GPU needs a reset / the node a drain; else usually the job's fault


#: NVIDIA XID errors the agent acts on (from NVIDIA's "XID Errors" catalogue). Node-fatal
#: ones make the node unhealthy; the others are reported as warnings (they fail the job that
#: caused them, not the node).
XIDS: dict[int, Xid] = {
    x.code: x
    for x in (
        Xid(13, "graphics engine exception (usually an application fault)", False),
        Xid(31, "GPU memory page fault (usually an application fault)", False),
        Xid(43, "GPU stopped processing (usually an application fault)", False),
        Xid(45, "preemptive cleanup after an earlier error", False),
        Xid(48, "double-bit ECC error: uncorrectable memory error", True),
        Xid(61, "internal micro-controller breakpoint/warning", True),
        Xid(62, "internal micro-controller halt", True),
        Xid(63, "ECC page retirement or row remapping recorded", False),
        Xid(64, "ECC page retirement or row remapping failed", True),
        Xid(74, "NVLink error", True),
        Xid(79, "GPU has fallen off the bus", True),
        Xid(92, "high single-bit ECC error rate", False),
        Xid(94, "contained ECC error (the affected application must restart)", False),
        Xid(95, "uncontained ECC error: GPU reset required", True),
        Xid(119, "GSP RPC timeout", True),
        Xid(120, "GSP error", True),
        Xid(140, "unrecovered ECC error", True),
    )
}


def explain_xid(code: int) -> str:
    known = XIDS.get(code)
    return f"XID {code}: {known.meaning}" if known else f"XID {code}: not in the table"


@dataclass(frozen=True, slots=True)
class NodeHealth:
    healthy: bool
    reasons: tuple[str, ...] = ()  # why not healthy
    warnings: tuple[str, ...] = ()  # worth telling, not worth draining for


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One run of the health-check program."""

    healthy: bool
    reason: str = ""
    exit_code: int | None = None  # None: timed out or could not start
    duration_s: float = 0.0
    time: float = 0.0


def _truncate(text: str) -> str:
    text = text.strip()
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"


class HealthCheckProgram:
    """Runs ``argv`` every ``interval_s`` seconds with a ``timeout_s`` limit.

    The program's stdout and stderr together are its message; on a timeout the whole process
    group is killed (SIGKILL), so a stuck check cannot pile up.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float = 60.0,
        interval_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not argv:
            raise ValueError("a health-check program needs a command")
        if timeout_s <= 0 or interval_s <= 0:
            raise ValueError("timeout_s and interval_s must be positive")
        self.argv = list(argv)
        self.timeout_s = timeout_s
        self.interval_s = interval_s
        self._clock = clock
        self.last: CheckResult | None = None

    def due(self, now: float) -> bool:
        return self.last is None or now - self.last.time >= self.interval_s

    def maybe_run(self, now: float) -> CheckResult | None:
        """Run when due; the latest result (None before the first run)."""
        if self.due(now):
            self.run(now)
        return self.last

    def run(self, now: float | None = None) -> CheckResult:
        start = self._clock()
        stamp = start if now is None else now
        try:
            proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            result = CheckResult(
                False, f"health check {self.argv[0]} cannot start: {exc}", None, 0.0, stamp
            )
            self.last = result
            return result
        try:
            out, _ = proc.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            text = _truncate(out.decode(errors="replace"))
            reason = f"health check timed out after {self.timeout_s:g} s"
            result = CheckResult(
                False, f"{reason}: {text}" if text else reason, None, self._clock() - start, stamp
            )
        else:
            text = _truncate(out.decode(errors="replace"))
            code = proc.returncode
            if code == 0:
                result = CheckResult(True, text, 0, self._clock() - start, stamp)
            else:
                reason = text or f"health check exited with {code}"
                result = CheckResult(False, reason, code, self._clock() - start, stamp)
        self.last = result
        return result


def gpu_health(gpus: Iterable[GpuSample], *, ecc_threshold: int = 0) -> tuple[list[str], list[str]]:
    """(reasons, warnings) from GPU samples: lost GPUs, node-fatal XIDs, uncorrectable ECC."""
    reasons: list[str] = []
    warnings: list[str] = []
    for g in gpus:
        name = f"GPU {g.index}" + (f" ({g.uuid})" if g.uuid else "")
        if g.lost:
            reasons.append(f"{name} is lost (fallen off the bus or not answering)")
        for code in g.xid_errors:
            known = XIDS.get(code)
            if known is not None and known.node_fatal:
                reasons.append(f"{name}: {explain_xid(code)}")
            else:
                warnings.append(f"{name}: {explain_xid(code)}")
        if g.ecc_uncorrected > ecc_threshold:
            reasons.append(f"{name}: {g.ecc_uncorrected} uncorrectable ECC errors")
    return reasons, warnings


def node_health(
    gpus: Iterable[GpuSample] = (),
    check: CheckResult | None = None,
    *,
    ecc_threshold: int = 0,
) -> NodeHealth:
    """The node's health from its GPU samples and the latest health-check result."""
    reasons, warnings = gpu_health(gpus, ecc_threshold=ecc_threshold)
    if check is not None and not check.healthy:
        reasons.insert(0, check.reason or "health check failed")
    return NodeHealth(not reasons, tuple(reasons), tuple(warnings))


class HealthMonitor:
    """Keeps the node's sticky health: an XID or a lost GPU seen once stays until cleared.

    An XID event is delivered once; without stickiness the node would look healthy again at
    the next sample. ``clear()`` (after an administrator's repair, or an agent restart) forgets.
    """

    def __init__(
        self, program: HealthCheckProgram | None = None, *, ecc_threshold: int = 0
    ) -> None:
        self.program = program
        self.ecc_threshold = ecc_threshold
        self._sticky: list[str] = []
        self._warnings: list[str] = []

    def update(self, gpus: Sequence[GpuSample], now: float) -> NodeHealth:
        check = self.program.maybe_run(now) if self.program is not None else None
        current = node_health(gpus, check, ecc_threshold=self.ecc_threshold)
        for reason in current.reasons:
            if "XID" in reason and reason not in self._sticky:
                self._sticky.append(reason)
        self._warnings = [*self._warnings, *current.warnings][-20:]
        reasons = [*current.reasons, *(r for r in self._sticky if r not in current.reasons)]
        return NodeHealth(not reasons, tuple(reasons), tuple(self._warnings))

    def clear(self) -> None:
        self._sticky.clear()
        self._warnings.clear()
