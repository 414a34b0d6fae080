"""The portal's pure parts: the job timeline, scaled clusters and what-if policies."""

from __future__ import annotations

import pytest

from fusesched.model.node import LABEL_HOSTNAME, NodeSpec
from fusesched.model.resources import Resources
from fusesched.policies.registry import CoreConfig
from fusesched.portal.api import timeline
from fusesched.portal.schemas import WhatIfRequest
from fusesched.portal.whatif import MAX_NODES, WhatIfError, alternative_config, scaled_nodes


def test_timeline_of_a_waiting_job() -> None:
    (span,) = timeline(10.0, None, None, [], [])
    assert (span.kind, span.start, span.end) == ("wait", 10.0, None)


def test_timeline_of_a_finished_gang() -> None:
    tasks = [("1.main.0", "a", 12.0, 20.0), ("1.main.1", "b", 12.5, None)]
    spans = timeline(10.0, 12.0, 21.0, tasks, [])
    assert [(s.kind, s.start, s.end) for s in spans] == [
        ("wait", 10.0, 12.0),
        ("run", 12.0, 21.0),
        ("task", 12.0, 20.0),
        ("task", 12.5, None),
    ]
    assert spans[3].node == "b"


def test_timeline_of_a_requeued_job() -> None:
    spans = timeline(0.0, 30.0, None, [], [20.0])
    assert [(s.label, s.start, s.end) for s in spans[:2]] == [
        ("queued", 0.0, 20.0),
        ("requeued", 20.0, 30.0),
    ]


def nodes(n: int) -> list[NodeSpec]:
    return [NodeSpec(f"n{i}", Resources({"cpu": 4000}), {"pool": "x"}) for i in range(n)]


@pytest.mark.parametrize(
    ("count", "scale", "want"), [(3, 1.0, 3), (3, 2.0, 6), (4, 0.5, 2), (3, 0.1, 1)]
)
def test_scaled_nodes(count: int, scale: float, want: int) -> None:
    out = scaled_nodes(nodes(count), scale)
    assert len(out) == want
    assert len({n.name for n in out}) == want
    assert all(n.labels[LABEL_HOSTNAME] == n.name for n in out)  # copies are their own hosts
    assert all(n.labels["pool"] == "x" for n in out)


def test_scaled_nodes_is_bounded() -> None:
    with pytest.raises(WhatIfError, match="more than a what-if"):
        scaled_nodes(nodes(MAX_NODES), 1.5)
    with pytest.raises(WhatIfError) as empty:
        scaled_nodes([], 1.0)
    assert empty.value.status == 409


def test_alternative_config_keeps_the_rest() -> None:
    base = CoreConfig(placement="best-fit", default_estimate_s=123.0)
    alt = alternative_config(base, WhatIfRequest(queue_order="sjf"))
    assert (alt.queue_order, alt.backfill, alt.placement) == ("sjf", "easy", "best-fit")
    assert alt.default_estimate_s == 123.0
    with pytest.raises(WhatIfError, match="unknown backfill 'x'"):
        alternative_config(base, WhatIfRequest(backfill="x"))
