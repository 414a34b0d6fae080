"""The web portal: one page for users and operators, served by the controller itself.

:func:`mount` adds the portal to the API app: the static page under ``/portal/`` (HTML, CSS
and JavaScript shipped in this package, no CDN) and the few JSON routes the page needs beyond
the public API under ``/v1/portal/`` (:mod:`fusesched.portal.api`). The page calls the JSON
API with the user's bearer token, so every scoping rule is enforced by the server. See
docs/PORTAL.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastapi import FastAPI

    from fusesched.controller.auth import Authenticator
    from fusesched.controller.service import Controller


def mount(app: FastAPI, controller: Controller, auth: Authenticator) -> None:
    """Serve the portal's page and JSON routes from ``app``."""
    from fusesched.portal.api import add_portal_routes
    from fusesched.portal.static_files import PORTAL_PATH, portal_files

    add_portal_routes(app, controller, auth)
    app.mount(PORTAL_PATH, portal_files(), name="portal")
