"""The SDK's calls for advance reservations, tokens and the purge of old job records (mostly
an administrator's). :class:`fusesched.sdk.Client` has them."""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from typing import Any, Final

from fusesched.sdk_transport import Transport, path_segment

#: The counts of ``POST /v1/admin/purge``'s answer, summed over the calls of one purge.
PURGE_COUNTS: Final = (
    "jobs",
    "tasks",
    "events",
    "tokens",
    "environments",
    "files",
    "bytes",
    "kept",
)


class AdminCalls(Transport):
    """The routes under ``/v1/reservations``, ``/v1/tokens`` and ``/v1/admin``."""

    def reservations(self) -> list[dict[str, Any]]:
        """The advance reservations that have not ended, by start (docs/RESERVATIONS.md)."""
        return list(self._call("GET", "/v1/reservations")["reservations"])

    def create_reservation(
        self,
        name: str,
        nodes: Sequence[str],
        start: float,
        end: float,
        users: Sequence[str] = (),
        tenants: Sequence[str] = (),
    ) -> dict[str, Any]:
        """Reserve nodes from ``start`` to ``end`` (Unix seconds) for users or tenants (neither:
        maintenance). The reservation and ``warnings`` (running jobs that run into it)."""
        body = {
            "name": name,
            "nodes": list(nodes),
            "start": start,
            "end": end,
            "users": list(users),
            "tenants": list(tenants),
        }
        return dict(self._call("POST", "/v1/reservations", body))

    def update_reservation(
        self,
        name: str,
        *,
        start: float | None = None,
        end: float | None = None,
        duration_s: float | None = None,
        nodes: Sequence[str] | None = None,
        users: Sequence[str] | None = None,
        tenants: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """Change a reservation (what is None is kept; ``duration_s`` sets the end from the
        new or kept start; an empty ``users`` or ``tenants`` clears it). The reservation as
        changed and ``warnings`` (running jobs that run into the new window)."""
        given = {
            "start": start,
            "end": end,
            "duration_s": duration_s,
            "nodes": None if nodes is None else list(nodes),
            "users": None if users is None else list(users),
            "tenants": None if tenants is None else list(tenants),
        }
        body = {key: value for key, value in given.items() if value is not None}
        return dict(self._call("PATCH", f"/v1/reservations/{path_segment(name)}", body))

    def delete_reservation(self, name: str) -> None:
        """Delete a reservation; the jobs waiting to run in it are rejected."""
        self._call("DELETE", f"/v1/reservations/{path_segment(name)}", raw=True)

    def create_token(
        self,
        user: str = "",
        *,
        tenant: str = "",
        role: str = "user",
        kind: str = "user",
        node: str | None = None,
        expires_in_s: float | None = None,
    ) -> dict[str, Any]:
        """Make a token; the answer's ``token`` is shown this once (only its hash is kept)."""
        body: dict[str, Any] = {"kind": kind, "user": user, "tenant": tenant, "role": role}
        if node is not None:
            body["node"] = node
        if expires_in_s is not None:
            body["expires_in_s"] = expires_in_s
        return dict(self._call("POST", "/v1/tokens", body))

    def tokens(self, kind: str | None = None, include_revoked: bool = False) -> list[Any]:
        query = {"include_revoked": str(include_revoked).lower()} | ({"kind": kind} if kind else {})
        return list(self._call("GET", "/v1/tokens?" + urllib.parse.urlencode(query)))

    def revoke_token(self, token_id: str) -> str:
        return str(self._call("DELETE", f"/v1/tokens/{path_segment(token_id)}")["revoked"])

    def purge(
        self, ended_before: float, *, dry_run: bool = False, force: bool = False
    ) -> dict[str, Any]:
        """Remove the records of the jobs that ended before ``ended_before`` (Unix seconds)
        — cluster-admins; docs/DEPLOY.md, "Retention". ``force``: also within the window of
        runs fair share reads back after a restart (else refused, 409). Each call to the
        controller works for seconds at most; this one calls again until it is done. The
        counts (``jobs``, ``tasks``, ``events``, ``tokens``, ``environments``, ``files``,
        ``bytes``, ``kept``) summed; with ``dry_run`` what would go, removing nothing."""
        body: dict[str, Any] = {"ended_before": ended_before, "dry_run": dry_run, "force": force}
        total = dict.fromkeys(PURGE_COUNTS, 0)
        while True:
            answer = self._call("POST", "/v1/admin/purge", body)
            for key in PURGE_COUNTS:
                total[key] += int(answer.get(key, 0))
            if not answer.get("more") or not answer.get("after"):
                break
            body["after"] = answer["after"]
        return {"ended_before": ended_before, "dry_run": dry_run, **total}
