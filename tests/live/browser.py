"""Headless Chromium for the portal's browser tests (Debian's ``chromium``, installed by
scripts/system_deps.sh, driven by Playwright)."""

from __future__ import annotations

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
]
LAPTOP = {"width": 1280, "height": 800}
