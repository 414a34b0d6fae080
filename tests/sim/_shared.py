"""Where the shared data (real traces, published anchors) live for the simulator tests.

The project is checked out beside ``shared/`` (``/work/main`` and ``/work/shared`` here; CI places
``shared`` beside the checkout as well). Tests that need it skip when it is absent.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from fusesched.traces.swf import RlJobs, load_swf, rlscheduler_jobs

SHARED = Path(__file__).resolve().parents[2].parent / "shared"

needs_shared = pytest.mark.skipif(not SHARED.exists(), reason="../shared (real traces) is absent")


@cache
def rl_jobs(relative_path: str) -> RlJobs:
    """A trace under ``shared/``, loaded and cleaned up once per test session."""
    return rlscheduler_jobs(load_swf(SHARED / relative_path))
