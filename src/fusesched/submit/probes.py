"""Liveness and readiness probes of a task group (the group fields ``liveness`` and
``readiness``; docs/SUBMIT.md "Probes").

A probe is one check, run by the node agent against each running task of the group every
``period_s`` seconds (the first ``initial_delay_s`` after the task starts):

* ``http: {port, path}``: ``GET http://127.0.0.1:<port><path>``; a status from 200 to 399
  passes;
* ``tcp: {port}``: a TCP connection to ``127.0.0.1:<port>`` that opens passes;
* ``exec: [argv]``: the program, run with the task's environment, in its working folder, as
  its user (in its container image for a container task), passes when it exits 0.

A check that takes longer than ``timeout_s`` fails (an ``exec`` check is killed then).
``failure_threshold`` failures in a row make a liveness probe fail (the agent stops the task and
its job's restart policy applies) or a ready task not ready; ``success_threshold`` successes in
a row make a task ready (a liveness probe's must be 1, as in Kubernetes). The same model goes to
the agents in each :class:`~fusesched.api.wire.TaskLaunch`.
"""

from __future__ import annotations

import re
from typing import Annotated, Final

from pydantic import Field, field_validator, model_validator

from fusesched.submit.strict_model import StrictModel

#: The longest probe period and timeout (an hour) and initial delay (a day).
MAX_PERIOD_S: Final = 3600.0
MAX_DELAY_S: Final = 86400.0
#: The shortest period: a probe is a request to the task, twice a second at most.
MIN_PERIOD_S: Final = 0.5
MIN_TIMEOUT_S: Final = 0.1
MAX_THRESHOLD: Final = 1000
#: The longest URL path and exec command (words) a probe may have.
MAX_PATH: Final = 2048
MAX_ARGV: Final = 256
#: A URL path: printable ASCII without spaces (percent-encode anything else), from ``/``.
_PATH_RE: Final = re.compile(r"^/[!-~]*$")

Port = Annotated[int, Field(ge=1, le=65535)]


class HttpCheck(StrictModel):
    """``GET http://127.0.0.1:<port><path>``: 200–399 passes."""

    port: Port
    path: str = "/"

    @field_validator("path")
    @classmethod
    def _path(cls, path: str) -> str:
        if len(path) > MAX_PATH:
            raise ValueError(f"the path is {len(path)} characters long: at most {MAX_PATH}")
        if not _PATH_RE.fullmatch(path):
            raise ValueError(
                f"path {path!r} must start with / and hold printable ASCII only, without "
                "spaces (percent-encode the rest)"
            )
        return path

    def describe(self) -> str:
        return f"GET http://127.0.0.1:{self.port}{self.path}"


class TcpCheck(StrictModel):
    """A TCP connection to ``127.0.0.1:<port>`` that opens passes."""

    port: Port

    def describe(self) -> str:
        return f"TCP 127.0.0.1:{self.port}"


class Probe(StrictModel):
    """One of ``http``, ``tcp`` or ``exec``, and when and how often it runs."""

    http: HttpCheck | None = None
    tcp: TcpCheck | None = None
    exec: Annotated[list[str], Field(min_length=1, max_length=MAX_ARGV)] | None = None
    initial_delay_s: Annotated[float, Field(ge=0, le=MAX_DELAY_S)] = 0.0
    period_s: Annotated[float, Field(ge=MIN_PERIOD_S, le=MAX_PERIOD_S)] = 10.0
    timeout_s: Annotated[float, Field(ge=MIN_TIMEOUT_S, le=MAX_PERIOD_S)] = 1.0
    failure_threshold: Annotated[int, Field(ge=1, le=MAX_THRESHOLD)] = 3
    success_threshold: Annotated[int, Field(ge=1, le=MAX_THRESHOLD)] = 1

    @field_validator("exec")
    @classmethod
    def _argv(cls, argv: list[str] | None) -> list[str] | None:
        if argv is not None and not argv[0]:
            raise ValueError("the program (exec[0]) must not be empty")
        return argv

    @model_validator(mode="after")
    def _one_check(self) -> Probe:
        given = [name for name in ("http", "tcp", "exec") if getattr(self, name) is not None]
        if len(given) != 1:
            said = "none" if not given else " and ".join(given)
            raise ValueError(
                f"a probe needs exactly one check of http: {{port, path}}, tcp: {{port}} or "
                f"exec: [argv]; {said} given"
            )
        return self

    def describe(self) -> str:
        """What it checks, for people: ``GET http://127.0.0.1:8080/healthz``."""
        if self.http is not None:
            return self.http.describe()
        if self.tcp is not None:
            return self.tcp.describe()
        return "exec " + " ".join(self.exec or ())


class LivenessProbe(Probe):
    """A probe whose failure stops the task: one success is enough (as Kubernetes has it)."""

    @field_validator("success_threshold")
    @classmethod
    def _one_success(cls, value: int) -> int:
        if value != 1:
            raise ValueError(
                f"a liveness probe's success_threshold must be 1, not {value} (one success "
                "shows the task is alive)"
            )
        return value


#: The probe models, for the "did you mean" of unknown fields.
PROBE_MODELS: Final = (Probe, HttpCheck, TcpCheck)
