"""The portal's page and assets, served from this package (no CDN: it works offline).

Every response carries a strict Content-Security-Policy: scripts, styles and images come from
the controller only, and nothing inline runs, so text shown on the page (job names, logs)
cannot become code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

PORTAL_PATH: Final = "/portal"
STATIC_DIR: Final = Path(__file__).with_name("static")

SECURITY_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


class PortalFiles(StaticFiles):
    """Static files with the portal's security headers."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response


def portal_files() -> PortalFiles:
    return PortalFiles(directory=STATIC_DIR, html=True)
