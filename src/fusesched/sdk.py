"""The Python SDK: talk to a fusesched controller from a program or a notebook.

    from fusesched.sdk import Client
    client = Client()                      # FUSESCHED_CONTROLLER, else http://127.0.0.1:8642
    job = client.submit({"name": "hello", "groups": [{"resources": {"cpu": 1},
                                                       "argv": ["echo", "hi"]}]})
    client.wait(job)["state"]              # "Completed"
    print(client.logs(job))

It uses only the standard library (``http.client``, one kept-alive connection per thread),
so importing it is quick: the CLI is built on it and a submission does not pay for an HTTP
framework's start-up.

A controller with authentication wants a token: ``Client(url, token=...)``, else the
``FUSESCHED_TOKEN`` variable, else the file ``~/.config/fusesched/token``. A controller that
speaks TLS with the cluster's own CA: ``Client("https://...", ca="ca.crt")`` (or
``FUSESCHED_CA``).

A controller with standbys (docs/LIVE.md, "Leader and standby"): give every URL,
``Client("http://a:8642,http://b:8642")`` (or a list, or the same in ``FUSESCHED_CONTROLLER``).
Requests go to the one that answered last; when it cannot be reached or answers 503
``{"detail": "standby"}``, the next one is tried, round after round for up to ``failover_s``
seconds (a take-over takes a few). A request is sent again elsewhere only when it cannot have
been carried out (no connection, or a standby's refusal) or is a read (GET).
"""

from __future__ import annotations

import getpass
import os
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from fusesched.client_base import (
    DEFAULT_URL,
    LOG_COMPLETE,
    LOG_CONFIRMED,
    LOG_MORE,
    NEXT_OFFSET,
    ControllerError,
    default_token,
    default_url,
    older_than,
    split_urls,
    token_file,
)
from fusesched.model.submit_host import this_host
from fusesched.sdk_admin import AdminCalls
from fusesched.sdk_steps import StepCalls
from fusesched.sdk_transport import path_segment

FINISHED = frozenset({"Completed", "Failed", "Cancelled"})

__all__ = [
    "DEFAULT_URL",
    "FINISHED",
    "Client",
    "ControllerError",
    "LogPage",
    "default_token",
    "default_url",
    "split_urls",
    "token_file",
]


class LogPage(NamedTuple):
    """A read of a log (:meth:`Client.log_page`)."""

    text: str
    next_offset: int  # the offset to ask for next
    # the text reaches the end of the log and nothing more will be written to it; None: the
    # controller does not say (it is older than end marks)
    complete: bool | None
    # its agent said where it ends (False with complete: the end of the output may be missing)
    confirmed: bool
    # the text stops short of what is written (the read's ``max_bytes``): read on at once
    more: bool = False


class Client(StepCalls, AdminCalls):
    """The controller's REST API, a method a route. Its constructor (controller URLs, timeout,
    token, CA, fail-over time) and the requests' transport are :class:`Transport`'s
    (:mod:`fusesched.sdk_transport`); the calls for job steps and terminals are
    :class:`StepCalls`'s (:mod:`fusesched.sdk_steps`), those for reservations and tokens
    :class:`AdminCalls`'s (:mod:`fusesched.sdk_admin`)."""

    # ------------------------------------------------------------------ jobs

    def submit(self, request: Mapping[str, Any]) -> str:
        """Submit one job (a JobRequest as a dict); returns its id.

        A request that names no ``user`` is submitted as the user running this program, or,
        with a token, as the token's user.
        """
        return str(self._call("POST", "/v1/jobs", self._with_user(request))["id"])

    def submit_many(self, requests: Sequence[Mapping[str, Any]]) -> list[str]:
        """Submit several jobs in one request (all or none are accepted)."""
        body = [self._with_user(r) for r in requests]
        return [str(i) for i in self._call("POST", "/v1/jobs/batch", body)["ids"]]

    def test_start(self, requests: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """When these jobs would start if submitted now, without submitting them
        (``POST /v1/starts/test``, ``sbatch --test-only``): per job, ``refused`` or its
        ``members`` with ``expected_start`` and ``nodes``."""
        body = [self._with_user(r) for r in requests]
        return dict(self._call("POST", "/v1/starts/test", body))

    def submit_files(
        self,
        files: Sequence[Mapping[str, Any]],
        submit_env: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Submit the jobs in submission files, parsed by the controller: each file is
        ``{"name": "job.sh", "text": "...", "args": [sbatch options]}``, and says this
        machine's host name as its ``submit_host`` (the jobs' ``SLURM_SUBMIT_HOST``) unless
        it names one (``None``: none). ``submit_env``: an environment the batch scripts' jobs
        inherit, as sbatch's from its shell (None: none; ``dict(os.environ)`` for this
        process's). Returns ``{"ids": [...], "warnings": [...]}``. A controller older than
        ``submit_host`` gets the files again without the host this call added."""
        host = this_host()
        body: dict[str, Any] = {"files": [dict(f) for f in files]}
        hosted = [
            {**f, "submit_host": host} if "submit_host" not in f and host is not None else f
            for f in body["files"]
        ]
        if submit_env is not None:
            body["submit_env"] = dict(submit_env)
        if not self.token:
            body["user"] = getpass.getuser()
        try:
            return dict(self._call("POST", "/v1/submissions", {**body, "files": hosted}))
        except ControllerError as exc:
            if hosted == body["files"] or not older_than(exc, "submit_host"):
                raise
        return dict(self._call("POST", "/v1/submissions", body))

    def show(self, job_id: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/v1/jobs/{path_segment(job_id)}"))

    def jobs(
        self,
        user: str | Sequence[str] | None = None,
        states: Sequence[str] = (),
        queue: str | Sequence[str] | None = None,
        limit: int = 50,
        array: str | None = None,
        *,
        phases: Sequence[str] = (),
        ids: Sequence[str] = (),
        names: Sequence[str] = (),
        me: bool = False,
        tenant: str | None = None,
        since: float | None = None,
        until: float | None = None,
        before: int | None = None,
        detail: bool = False,
        completing: bool = False,
        steps: bool = False,
        combine_arrays: bool = False,
    ) -> list[dict[str, Any]]:
        """Jobs newest first; ``array``: only that array's members. ``user`` and ``queue``
        may be several (any of them); ``states`` and ``phases``: in any of those states or
        phases; ``ids``: those jobs (an array's id: its members); ``me``: the token's user's;
        ``tenant``: that tenant's; ``since``/``until`` (Unix times): those waiting or running
        at some time between (not ended before ``since``, submitted by ``until``);
        ``before``: those submitted before the job whose ``seq`` this is (the next page after
        a full one: its last job's ``seq``); ``detail``: each with its ``tasks`` and
        ``restarts``, as :meth:`show` answers; ``completing``: also the jobs shown
        completing (Slurm's COMPLETING: ``completing`` in their views); ``steps``: each with
        its ``restarts`` and its latest run's ``steps`` summarised, not its tasks (a
        controller older than summaries leaves ``steps`` out); ``combine_arrays``: each
        array's members that wait for one reason as one row, as squeue shows them (the id
        ``9_[2-99%2]``, ``array_tasks`` and ``array_count``; ``limit`` counts rows). A
        controller older than that answers a row a member, without ``array_tasks``:
        :func:`fusesched.cli.array_rows.combine` combines them."""
        query: list[tuple[str, str]] = [("limit", str(limit))]
        query.extend(("user", u) for u in _several(user))
        query.extend(("queue", q) for q in _several(queue))
        if array:
            query.append(("array", array))
        query.extend(("state", s) for s in states)
        query.extend(("phase", s) for s in phases)
        query.extend(("id", i) for i in ids)
        query.extend(("name", n) for n in names)
        if me:
            query.append(("me", "true"))
        if detail:
            query.append(("detail", "true"))
        if completing:
            query.append(("completing", "true"))
        if steps:
            query.append(("steps", "true"))
        if combine_arrays:
            query.append(("combine_arrays", "true"))
        for key, value in (
            ("tenant", tenant),
            ("since", since),
            ("until", until),
            ("before", before),
        ):
            if value is not None:
                query.append((key, str(value)))
        return list(self._call("GET", "/v1/jobs?" + urllib.parse.urlencode(query)))

    def starts(self, user: str | None = None, queue: str | None = None) -> dict[str, Any]:
        """When the waiting jobs are expected to start (``GET /v1/starts``): ``jobs`` in
        start order, each with ``expected_start`` (Unix time, None beyond the horizon) and
        the ``nodes`` it would start on."""
        query = [(k, v) for k, v in (("user", user), ("queue", queue)) if v]
        suffix = "?" + urllib.parse.urlencode(query) if query else ""
        return dict(self._call("GET", "/v1/starts" + suffix))

    def cancel(self, job_id: str) -> list[str]:
        return list(self._call("POST", f"/v1/jobs/{path_segment(job_id)}/cancel", {})["cancelled"])

    def cancel_matching(self, **filters: Any) -> dict[str, Any]:
        """Cancel the unfinished jobs matching every one of ``filters`` (``user``, ``me``,
        ``name``, ``queue``, ``state``, ``id``: lists, ``POST /v1/jobs/cancel``): the ids
        ``cancelled``, and those matched that are ``denied`` (another user's)."""
        return dict(self._call("POST", "/v1/jobs/cancel", filters))

    def signal(self, job_id: str, signal: str | int, main_only: bool = False) -> list[str]:
        """Send a running job's tasks ``signal`` (``"USR1"``, ``"SIGUSR1"``, ``10``): their
        process groups, or with ``main_only`` their main processes; the job keeps running
        (Slurm's ``scancel --signal``). The job ids signalled."""
        return list(self.signal_report(job_id, signal, main_only)["signalled"])

    def signal_report(
        self, job_id: str, signal: str | int, main_only: bool = False, steps_only: bool = False
    ) -> dict[str, Any]:
        """:meth:`signal`, answering ``{"signalled": [ids], "signal": "USR1", "skipped":
        {id: why}}`` (``skipped``: an array's members that could not be signalled).
        ``steps_only``: a batch script's job steps alone, not its shell (Slurm's ``scancel
        --signal`` without ``-b``/``-f``; not with ``main_only``)."""
        body: dict[str, Any] = {"signal": signal, "main_only": main_only}
        if steps_only:  # (only when asked: a controller older than the field refuses it)
            body["steps_only"] = True
        answer = dict(self._call("POST", f"/v1/jobs/{path_segment(job_id)}/signal", body))
        answer.setdefault("skipped", {})
        return answer

    def hold(self, job_id: str, reason: str = "") -> list[str]:
        """Keep a waiting job (or an array's waiting members) from starting; the ids held."""
        path = f"/v1/jobs/{path_segment(job_id)}/hold"
        return list(self._call("POST", path, {"reason": reason})["held"])

    def release(self, job_id: str) -> list[str]:
        """Let a held job (or an array's held members) start again; the ids released."""
        return list(self._call("POST", f"/v1/jobs/{path_segment(job_id)}/release", {})["released"])

    def update(
        self,
        job_id: str,
        priority: int | None = None,
        qos: str | None = None,
        walltime_s: float | None = None,
        *,
        name: str | None = None,
        comment: str | None = None,
        queue: str | None = None,
        dependencies: Sequence[Mapping[str, str]] | None = None,
        begin_time: float | None = None,
    ) -> list[str]:
        """Change a waiting job's (or an array's waiting members') priority, QoS, time
        limit, name, comment, queue (Slurm's partition), dependencies (``[{"kind":
        "afterok", "job_id": "12"}, …]``; empty: none any more) or begin time (a Unix time),
        or a running job's time limit, name or comment; the ids changed. Only what is given
        is sent (a controller older than a field refuses it)."""
        body = {
            "priority": priority,
            "qos": qos,
            "walltime_s": walltime_s,
            "name": name,
            "comment": comment,
            "queue": queue,
            "dependencies": None if dependencies is None else [dict(d) for d in dependencies],
            "begin_time": begin_time,
        }
        path = f"/v1/jobs/{path_segment(job_id)}/update"
        answer = self._call("POST", path, {k: v for k, v in body.items() if v is not None})
        return list(answer["updated"])

    def requeue(self, job_id: str, reason: str = "", hold: bool = False) -> list[str]:
        """Stop a running job (or an array's running members) and queue it again; with
        ``hold``, held once queued. The ids requeued."""
        path = f"/v1/jobs/{path_segment(job_id)}/requeue"
        return list(self._call("POST", path, {"reason": reason, "hold": hold})["requeued"])

    def resubmit(self, job_id: str) -> dict[str, Any]:
        """Submit a job's stored request again, as this client's user and not held (an array
        member: the whole array); with the submitting shell's environment only when this is
        the job's own user. ``{"id", "ids" (an array's members), "warnings"}``."""
        return dict(self._call("POST", f"/v1/jobs/{path_segment(job_id)}/resubmit"))

    def logs(self, job_id: str, task: str | None = None, offset: int = 0) -> str:
        """The job's output (of its first task, or of ``task``) from byte ``offset`` on."""
        return self.logs_from(job_id, task, offset)[0]

    def logs_from(self, job_id: str, task: str | None = None, offset: int = 0) -> tuple[str, int]:
        """The job's output from byte ``offset`` on, all that is written (page after page,
        :meth:`log_page`), and the offset to ask for next (to follow a log: not the text's
        length, see ``GET /v1/jobs/{id}/logs``)."""
        texts: list[str] = []
        while True:
            page = self.log_page(job_id, task, offset)
            texts.append(page.text)
            moved, offset = page.next_offset != offset, page.next_offset
            if not (page.more and moved):
                return "".join(texts), offset

    def log_page(
        self,
        job_id: str,
        task: str | None = None,
        offset: int = 0,
        max_bytes: int | None = None,
    ) -> LogPage:
        """One read of the log from ``offset``: at most ``max_bytes`` of it (None: the
        controller's default, 4 MiB), with whether more is written past it and whether the log
        is complete (``GET /v1/jobs/{id}/logs``'s ``X-Log-More``, ``X-Log-Complete`` and
        ``X-Log-Confirmed``)."""
        query = {"offset": str(offset)} | ({"task": task} if task else {})
        if max_bytes is not None:
            query["max_bytes"] = str(max_bytes)
        path = f"/v1/jobs/{path_segment(job_id)}/logs?" + urllib.parse.urlencode(query)
        payload, answer = self._request("GET", path)
        after = answer.get(NEXT_OFFSET)
        complete = answer.get(LOG_COMPLETE)
        return LogPage(
            payload.decode(errors="replace"),
            int(after) if after is not None else offset + len(payload),
            None if complete is None else complete == "true",
            answer.get(LOG_CONFIRMED) == "true",
            answer.get(LOG_MORE) == "true",
        )

    def task_logs(
        self,
        job_id: str,
        offsets: Mapping[str, int],
        all_tasks: bool = False,
        max_bytes: int | None = None,
    ) -> dict[str, Any]:
        """The new output of several tasks of the job in one request (``POST
        /v1/jobs/{id}/logs``): each of ``offsets``'s tasks from its offset (with
        ``all_tasks``, every other task of the job from 0). ``{"job_id", "state", "tasks":
        [{"task_id", "offset", "next_offset", "text", "complete", "confirmed"}], "more"}``.
        It changes nothing, so it is sent again once when the connection is lost."""
        body: dict[str, Any] = {"offsets": dict(offsets), "all": all_tasks}
        if max_bytes is not None:
            body["max_bytes"] = max_bytes
        path = f"/v1/jobs/{path_segment(job_id)}/logs"
        try:
            return dict(self._call("POST", path, body))
        except ControllerError as exc:
            if exc.status != 0:
                raise
        return dict(self._call("POST", path, body))

    def wait(
        self, job_id: str, timeout: float | None = None, poll_s: float = 0.1
    ) -> dict[str, Any]:
        """Block until the job has finished; returns its final record."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.show(job_id)
            if job["state"] in FINISHED:
                return job
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {job['state']} after {timeout} s")
            time.sleep(poll_s)

    # ------------------------------------------------------------------ cluster

    def nodes(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/v1/nodes"))

    def drain_node(self, name: str, reason: str) -> dict[str, Any]:
        """Drain a node (cluster-admins): nothing new is placed there. The node's state and
        drain reason afterwards."""
        body = {"reason": reason}
        return dict(self._call("POST", f"/v1/nodes/{path_segment(name)}/drain", body))

    def undrain_node(self, name: str) -> dict[str, Any]:
        """Lift a node's drain (cluster-admins); its state afterwards."""
        return dict(self._call("POST", f"/v1/nodes/{path_segment(name)}/undrain", {}))

    def queues(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/v1/queues"))

    def licenses(self) -> list[dict[str, Any]]:
        """The cluster's licenses: total, in use, free, waiting jobs' demand."""
        return list(self._call("GET", "/v1/licenses"))

    def reconfigure(
        self, licenses: Mapping[str, int] | None = None, dry_run: bool = False
    ) -> dict[str, Any]:
        """Make the controller re-read its tenancy file and apply it, with ``licenses`` (all
        of the cluster's, by name; None: the counts stay) — cluster-admins. ``applied``,
        ``changes`` and ``notes``; with ``dry_run`` what would change, changing nothing."""
        body: dict[str, Any] = {"dry_run": dry_run}
        if licenses is not None:
            body["licenses"] = dict(licenses)
        return dict(self._call("POST", "/v1/reconfigure", body))

    def fairshare(self) -> list[dict[str, Any]]:
        """The fair-share tree, one row per account (as Slurm's sshare)."""
        return list(self._call("GET", "/v1/fairshare"))

    def usage(
        self,
        start: str | float = "-30d",
        end: str | float = "now",
        by: Sequence[str] = ("tenant", "user"),
        tenant: str | None = None,
        user: str | None = None,
    ) -> dict[str, Any]:
        """Usage over a window (``GET /v1/usage``): times as epoch seconds, ISO dates or
        times, ``now`` or ``-7d``; ``by`` any of tenant, user, queue. Returns ``{"rows":
        [...], "total": {...}, ...}`` with CPU-hours, GPU-hours by model, estimated kWh."""
        query = {"start": str(start), "end": str(end), "by": ",".join(by)}
        query |= ({"tenant": tenant} if tenant else {}) | ({"user": user} if user else {})
        return dict(self._call("GET", "/v1/usage?" + urllib.parse.urlencode(query)))

    def route(self, job: str | Mapping[str, Any]) -> dict[str, Any]:
        """Which pools may take a job and why: a submitted job's id, or a request (a dict)
        routed as if it were submitted now."""
        if isinstance(job, str):
            return dict(self._call("GET", f"/v1/jobs/{path_segment(job)}/route"))
        return dict(self._call("POST", "/v1/route", self._with_user(job)))

    def checkpoint(self, job_id: str | None = None, time: float | None = None) -> None:
        """Report that the job wrote a checkpoint (now, or at ``time``): preemption then
        prefers victims that lose less work. Inside a task, ``job_id`` defaults to
        ``FUSESCHED_JOB_ID`` and the job's own credential is used."""
        job = job_id or os.environ.get("FUSESCHED_JOB_ID")
        if not job:
            raise ValueError("no job id given and FUSESCHED_JOB_ID is not set")
        self._call("POST", f"/v1/jobs/{path_segment(job)}/checkpoint", {"time": time})

    def priority(self, job_id: str) -> dict[str, Any]:
        """A waiting job's multifactor priority, factor by factor."""
        return dict(self._call("GET", f"/v1/jobs/{path_segment(job_id)}/priority"))

    def efficiency(self, job_id: str) -> dict[str, Any]:
        """What a job used against what it asked for (``fusesched eff``, Slurm's seff): CPU
        time and efficiency, peak memory, GPU utilisation; null where not sampled."""
        return dict(self._call("GET", f"/v1/jobs/{path_segment(job_id)}/efficiency"))

    def health(self) -> dict[str, Any]:
        return dict(self._call("GET", "/healthz"))

    def _with_user(self, request: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(request)
        if not out.get("user") and not self.token:  # with a token, the controller knows
            out["user"] = getpass.getuser()
        return out


def _several(value: str | Sequence[str] | None) -> Sequence[str]:
    """A filter's values: none, one, or several."""
    if not value:
        return ()
    return (value,) if isinstance(value, str) else value
