"""Fixtures shared by the controller tests: a clock, and a controller with one registered
node (``n0``: 4 CPUs, 4 GiB) on a SQLite store, with its API."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock

from fusesched.api.app import create_app
from fusesched.api.wire import NodeInventory
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.service import Controller

ONE_NODE: Mapping[str, Any] = {
    "name": "n0",
    "resources": {"cpu": "4", "memory": "4Gi"},
    "cpu_ids": [0, 1, 2, 3],
}


def one_node_controller(path: Path, clock: Clock) -> Controller:
    """A controller on the store in ``path`` with node ``n0`` registered (close its
    ``persist`` when done)."""
    persist = Persistence(f"sqlite:///{path / 'db.sqlite'}")
    controller = Controller(persist, LogStore(path / "logs"), clock=clock)
    controller.register(NodeInventory.model_validate(ONE_NODE))
    return controller


@pytest.fixture
def clock() -> Clock:
    """A hand-moved clock for a controller under test."""
    return Clock()


@pytest.fixture
def ctl(tmp_path: Path, clock: Clock) -> Iterator[Controller]:
    controller = one_node_controller(tmp_path, clock)
    yield controller
    controller.persist.close()


@pytest.fixture
def client(ctl: Controller) -> TestClient:
    """The controller's API; a server error is an answer (500), not an exception."""
    return TestClient(create_app(ctl), raise_server_exceptions=False)
