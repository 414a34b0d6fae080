"""The cluster routes: nodes, queues, Prometheus metrics and usage accounting (sreport)."""

from __future__ import annotations

import logging
import time
from typing import Annotated

from fastapi import FastAPI, HTTPException, Query
from fastapi.responses import PlainTextResponse, Response
from sqlalchemy.exc import SQLAlchemyError

from fusesched.api.access import Access, Caller, person
from fusesched.api.queues import queue_view, visible_queues, visible_shares
from fusesched.api.responses import forbidden
from fusesched.api.schemas import (
    FairShareRow,
    LicenseView,
    NodeView,
    QueueView,
    UsageView,
    usage_view,
)
from fusesched.controller import completing_views, licenses, snapshots
from fusesched.controller.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from fusesched.controller.metrics import metrics_for
from fusesched.model.node import NodeState
from fusesched.model.resources import format_quantity
from fusesched.portal.views import NodeReasons
from fusesched.store.usage import (
    UsageForbidden,
    UsageQueryError,
    parse_by,
    parse_time,
    usage_report,
    usage_scope,
)

log = logging.getLogger(__name__)


def add_cluster_routes(app: FastAPI, access: Access) -> None:
    """Serve ``/v1/nodes``, ``/metrics``, ``/v1/queues``, ``/v1/fairshare`` and ``/v1/usage``
    from ``app``."""
    controller = access.controller
    checker = access.auth

    reasons = NodeReasons()  # (what GET /v1/nodes has read of the event log so far)

    @app.get("/v1/nodes", response_model=list[NodeView], tags=["cluster"])
    def nodes(p: Caller) -> list[NodeView]:
        """Every node with its capacity, what is free, its state and why it is not up (its
        latest state change, its operator's drain: when and by whom)."""
        person(p)
        try:
            reasons.refresh(controller.persist.store)
        except SQLAlchemyError as exc:  # the store down: what was read before still shows
            log.warning("node reasons not read: %s", exc)
        with reasons.lock:
            latest = dict(reasons.latest)
        drained = reasons.drains()
        now = controller.clock()
        out = []
        with controller.lock:  # (sinfo's comp of the moment the free amounts are)
            comp, listed = completing_views.nodes(controller), snapshots.nodes(controller)
        for inventory, state, seen, free in listed:
            live = controller.nodes.get(inventory.name)
            held = None if live is None or live.datasets is None else sorted(live.datasets)
            drain = None if live is None else live.drain
            when, by = drained.get(inventory.name, (None, None)) if drain else (None, None)
            change = latest.get(inventory.name)
            # (an agent that said it stopped answers no more, whatever beat came after)
            late = now - seen > controller.config.node_timeout_s or (live is not None and live.left)
            load = None if live is None else live.load
            out.append(
                NodeView(
                    name=inventory.name,
                    state=state.value,
                    address=inventory.address,
                    capacity=dict(inventory.resources),
                    free={k: format_quantity(k, v) for k, v in free.items()},
                    labels=dict(inventory.labels),
                    devices=len(inventory.devices),
                    last_heartbeat_s_ago=round(max(0.0, now - seen), 3),
                    datasets=held,
                    drain_reason=drain,
                    drained_at=when,
                    drained_by=by,
                    reason=change[1] if change and state is not NodeState.UP else None,
                    since=change[2] if change else None,
                    responding=state is NodeState.SUSPENDED or not late,
                    completing=inventory.name in comp,
                    free_memory_bytes=None if load is None else load.free_memory_bytes,
                    load1=None if load is None else load.load1,
                    load5=None if load is None else load.load5,
                )
            )
        return out

    @app.get("/v1/licenses", response_model=list[LicenseView], tags=["cluster"])
    def license_list(p: Caller) -> list[LicenseView]:
        """The cluster's licenses (controller --licenses): total, in use, free, and what
        waiting jobs ask for (docs/LICENSES.md); empty when none are configured."""
        person(p)
        return licenses.views(controller)

    @app.get("/metrics", response_class=PlainTextResponse, tags=["cluster"])
    def metrics(p: Caller) -> Response:
        """Prometheus metrics (text exposition format; docs/METRICS.md). Cluster-wide like
        /v1/nodes and /v1/queues: any person's token (a user token made for the Prometheus
        server is enough); machine credentials (agent, job, join) get 403."""
        person(p)
        return Response(metrics_for(controller).exposition(), media_type=METRICS_CONTENT_TYPE)

    @app.get("/v1/queues", response_model=list[QueueView], tags=["cluster"])
    def queues(p: Caller) -> list[QueueView]:
        """Each queue with its pending and running jobs; the tenancy configuration's queues
        (idle ones too) with their tenant, cohort, shares and quota: nominal, in use,
        borrowed from the cohort, still available (as Kueue's ClusterQueue status). Quotas:
        cluster-admins see all, others their own tenant's queues'."""
        person(p)
        return visible_queues(queue_view(controller)["queues"], p)

    @app.get("/v1/fairshare", response_model=list[FairShareRow], tags=["cluster"])
    def fairshare(p: Caller) -> list[FairShareRow]:
        """The fair-share tree (as Slurm's sshare): per account (organisation, tenant, queue,
        user) its shares, decayed usage and fair-share factor. Empty without a tenancy
        configuration (no fair share). Cluster-admins see the whole tree; a tenant-admin its
        tenant's branch; a user that branch without the other users."""
        person(p)
        return visible_shares(queue_view(controller)["fairshare"], p)

    @app.get("/v1/usage", response_model=UsageView, tags=["cluster"])
    def usage(
        p: Caller,
        start: Annotated[str, Query(description="ISO date/time, epoch s, now or -7d")] = "-30d",
        end: Annotated[str, Query(description="ISO date/time, epoch s, now or -1d")] = "now",
        by: Annotated[str, Query(description="comma-separated: tenant, user, queue")] = (
            "tenant,user"
        ),
        tenant: str | None = None,
        user: str | None = None,
    ) -> UsageView:
        """CPU-hours, GPU-hours by GPU model and estimated energy over a window (sreport).
        Cluster-admins see all; tenant-admins their tenant; users their own usage."""
        person(p)
        now = time.time()
        try:
            fields = parse_by(by)
            window = (parse_time(start, now), parse_time(end, now))
            if checker.enabled:
                tenant, user = usage_scope(p.role.value, p.user, p.tenant, tenant, user)
            report = usage_report(controller.persist.store, *window, fields, tenant, user, now=now)
        except UsageForbidden as exc:
            raise forbidden(str(exc)) from None
        except UsageQueryError as exc:
            raise HTTPException(422, str(exc)) from None
        return usage_view(report)
