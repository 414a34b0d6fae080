"""What a job asks for when a run goes wrong: how it is restarted or requeued after a failure
outside it (a node or GPU fault, a hang, a lost agent) and, if it asks, after its own failing
exits or after every exit (:class:`RestartRequest`); and whether and how soon a run that
stopped making progress counts as hung (:class:`HangRequest`). Part of a
:class:`~fusesched.submit.request.JobRequest`.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from fusesched.submit.strict_model import StrictModel


class RestartRequest(StrictModel):
    """What to do when a run fails for a reason outside the job (node or GPU fault, hang,
    lost agent): ``requeue-excluding-node`` (default), ``restart-in-place`` or ``notify``.
    ``retry_application_failures`` also restarts it after a non-zero exit of its own;
    ``always`` after any exit of a task, 0 included (Kubernetes' ``restartPolicy: Always``,
    a Deployment's: a service that is never done), and so sets the former."""

    mode: Annotated[str, Field(pattern="^(notify|restart-in-place|requeue-excluding-node)$")] = (
        "requeue-excluding-node"
    )
    max_restarts: Annotated[int, Field(ge=0, le=1000)] = 3
    backoff_s: Annotated[float, Field(ge=0, le=86400)] = 30.0
    retry_application_failures: bool = False
    # dumped only when true, as JobRequest's ``attended``: an older controller refuses it
    always: bool = Field(default=False, exclude_if=lambda value: not value)

    @model_validator(mode="after")
    def _always_restarts(self) -> RestartRequest:
        """``always`` sets ``retry_application_failures`` (so the stored request says what
        the job does); a request that says otherwise, or ``mode: notify``, is refused."""
        if not self.always:
            return self
        if self.mode == "notify":
            raise ValueError(
                "always restarts the job after every exit, and mode notify never restarts it: "
                "give mode restart-in-place or requeue-excluding-node"
            )
        said = "retry_application_failures" in self.model_fields_set
        if said and not self.retry_application_failures:
            raise ValueError(
                "always restarts the job after every exit, failing ones included: "
                "retry_application_failures false contradicts it (leave it out)"
            )
        object.__setattr__(self, "retry_application_failures", True)  # (frozen: set once here)
        return self


class HangRequest(StrictModel):
    """Per-job hang detection: off, or a window other than the job type's default."""

    enabled: bool | None = None  # None: as the job type's default (off for services)
    window_s: Annotated[float, Field(gt=0, le=7 * 86400)] | None = None
    startup_s: Annotated[float, Field(ge=0, le=7 * 86400)] | None = None
