"""Bad input to the REST API gets a 4xx with a reason, never a 500, and stores nothing:
numbers JSON cannot write, integers too large for the store, arrays and quantities too large
for the controller, times outside the calendar."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock

from fusesched.api.app import create_app
from fusesched.api.wire import NodeInventory
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.service import Controller

GROUP = '{"resources": {"cpu": "1"}, "argv": ["true"]}'


@pytest.fixture
def ctl(tmp_path: Path, clock: Clock) -> Iterator[Controller]:
    persist = Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}")
    controller = Controller(persist, LogStore(tmp_path / "logs"), clock=clock)
    controller.register(NodeInventory(name="n0", resources={"cpu": "4", "memory": "4Gi"}))
    yield controller
    persist.close()


@pytest.fixture
def client(ctl: Controller) -> TestClient:
    return TestClient(create_app(ctl), raise_server_exceptions=False)


def post(client: TestClient, path: str, body: str) -> tuple[int, str]:
    answer = client.post(path, content=body, headers={"content-type": "application/json"})
    return answer.status_code, answer.text


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/jobs", f'{{"groups": [{GROUP}], "walltime_s": NaN}}'),
        ("/v1/jobs", f'{{"groups": [{GROUP}], "walltime_s": 1e400}}'),
        ("/v1/jobs/batch", f'[{{"groups": [{GROUP}], "checkpoint_interval_s": -Infinity}}]'),
        ("/v1/portal/whatif", '{"scale": Infinity}'),
    ],
)
def test_a_non_finite_number_is_a_422_not_a_500(client: TestClient, path: str, body: str) -> None:
    status, text = post(client, path, body)
    assert status == 422, text
    assert "finite" in text


def test_a_priority_beyond_the_store_is_refused_and_the_batch_stores_nothing(
    client: TestClient, ctl: Controller
) -> None:
    status, text = post(client, "/v1/jobs", f'{{"groups": [{GROUP}], "priority": {10**26}}}')
    assert status == 422, text
    batch = f'[{{"groups": [{GROUP}]}}, {{"groups": [{GROUP}], "priority": {-(2**40)}}}]'
    status, text = post(client, "/v1/jobs/batch", batch)
    assert status == 422, text
    assert not ctl.jobs
    assert client.get("/v1/jobs").json() == []
    status, _ = post(client, "/v1/jobs", f'{{"groups": [{GROUP}], "priority": {2**31 - 1}}}')
    assert status == 201


def test_an_array_over_a_million_jobs_is_refused_at_once(
    client: TestClient, ctl: Controller
) -> None:
    status, text = post(
        client, "/v1/jobs", f'{{"groups": [{GROUP}], "array": {{"start": 0, "stop": {10**6}}}}}'
    )
    assert status == 422, text
    assert "at most 1,000,000 indices" in text
    assert not ctl.jobs


def test_a_node_too_large_for_the_core_cannot_register(client: TestClient, ctl: Controller) -> None:
    body = '{"name": "huge", "resources": {"cpu": "99999999999999999999999"}}'
    status, text = post(client, "/v1/agents/register", body)
    assert status == 422, text
    assert "too large" in text
    ctl.run_cycle()  # the scheduler still runs
    assert "huge" not in ctl.nodes


@pytest.mark.parametrize(
    "query",
    [
        "/v1/jobs?before=99999999999999999999",
        "/v1/usage?start=99999999999999999999999999",
        "/v1/usage?start=-99999999999999999999d",
    ],
)
def test_numbers_beyond_the_store_or_the_calendar_are_a_422(client: TestClient, query: str) -> None:
    answer = client.get(query)
    assert answer.status_code == 422, answer.text
