"""The REST API: validate, hand the change to the controller, answer from the store.

Routes never set job state themselves; everything goes through :class:`Controller`. The routes
live by topic in :mod:`~fusesched.api.job_routes` (logs: :mod:`~fusesched.api.log_routes`),
:mod:`~fusesched.api.cluster_routes`, :mod:`~fusesched.api.machine_routes` and
:mod:`~fusesched.api.token_routes`; who may call them is :mod:`~fusesched.api.access`.
"""

from __future__ import annotations

from fastapi import FastAPI

from fusesched import __version__
from fusesched.api.access import Access
from fusesched.api.alive_routes import add_alive_routes
from fusesched.api.cancel_routes import add_cancel_routes
from fusesched.api.cluster_routes import add_cluster_routes
from fusesched.api.efficiency_routes import add_efficiency_routes
from fusesched.api.hot_path import SubmissionsHotPath
from fusesched.api.job_routes import add_job_routes
from fusesched.api.log_routes import add_log_routes
from fusesched.api.machine_routes import add_machine_routes
from fusesched.api.node_routes import add_node_routes
from fusesched.api.pty_routes import add_pty_routes
from fusesched.api.purge_routes import add_purge_routes
from fusesched.api.reconfigure_routes import add_reconfigure_routes
from fusesched.api.reservation_routes import add_reservation_routes
from fusesched.api.responses import add_error_handlers
from fusesched.api.resubmit_routes import add_resubmit_routes
from fusesched.api.schemas import Health
from fusesched.api.signal_routes import add_signal_routes
from fusesched.api.start_routes import add_start_routes
from fusesched.api.stdin_routes import add_stdin_routes
from fusesched.api.token_routes import add_token_routes
from fusesched.api.url_text import NulInUrl
from fusesched.controller.auth import Authenticator
from fusesched.controller.service import Controller
from fusesched.portal import mount as mount_portal


def create_app(controller: Controller, auth: Authenticator | None = None) -> FastAPI:
    """The API of ``controller``. Without ``auth`` (or with it disabled) every caller may do
    everything; with it, every route but ``/healthz`` needs a valid bearer token."""
    if auth is None:
        auth = Authenticator(controller.persist.store, enabled=False)
    app = FastAPI(
        title="fusesched",
        version=__version__,
        description="The fused scheduler: HPC, AI and general workloads on one pool.",
    )
    add_error_handlers(app)
    app.state.auth = auth

    @app.get("/healthz", response_model=Health, tags=["meta"])
    def health() -> Health:
        return Health(
            status="ok",
            nodes=len(controller.nodes),
            jobs_active=len(controller.jobs),
            cycles=controller.cycles,
        )

    access = Access(controller, auth)
    add_job_routes(app, access)
    add_cancel_routes(app, access)
    add_resubmit_routes(app, access)
    add_log_routes(app, access)
    add_signal_routes(app, access)
    add_alive_routes(app, access)
    add_pty_routes(app, access)
    add_stdin_routes(app, access)
    add_efficiency_routes(app, access)
    add_cluster_routes(app, access)
    add_node_routes(app, access)
    add_reconfigure_routes(app, access)
    add_reservation_routes(app, access)
    add_start_routes(app, access)
    add_machine_routes(app, access)
    add_token_routes(app, access)
    add_purge_routes(app, access)
    mount_portal(app, controller, auth)
    # accepted submissions skip routing: a middleware added before this one would not see them
    app.add_middleware(SubmissionsHotPath, access=access)
    app.add_middleware(NulInUrl)  # outermost: a NUL in a path or query is a 422 before all else
    return app
