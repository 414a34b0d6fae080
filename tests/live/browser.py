"""Headless Chromium for the portal's browser tests (Debian's ``chromium``, installed by
scripts/system_deps.sh, driven by Playwright)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
]
LAPTOP = {"width": 1280, "height": 800}


def playwright_or_skip() -> Any:
    """Playwright's sync API; at a test module's top level, skips the module when Playwright
    or Chromium is absent."""
    playwright_sync = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed"
    )
    if not Path(CHROMIUM).exists():
        pytest.skip(
            f"{CHROMIUM} is absent (scripts/system_deps.sh installs Debian's chromium)",
            allow_module_level=True,
        )
    return playwright_sync
