"""Fixtures shared by the controller tests."""

from __future__ import annotations

import pytest
from tests.builders import Clock


@pytest.fixture
def clock() -> Clock:
    """A hand-moved clock for a controller under test."""
    return Clock()
