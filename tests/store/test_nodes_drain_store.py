"""The store keeps an operator's drain across re-registrations (nodes.drain_reason)."""

from __future__ import annotations

import pytest

from fusesched.store import NodeRow, Store
from fusesched.store.errors import UnknownNode


def test_a_drain_outlives_re_registration(url: str) -> None:
    with Store(url) as store:
        store.upsert_node(NodeRow(name="n1", address="a", registered_at=1.0))
        assert store.get_node("n1").drain_reason is None  # type: ignore[union-attr]
        store.set_node_drain("n1", "PSU swap")
        store.upsert_node(NodeRow(name="n1", address="b", registered_at=2.0))
        row = store.get_node("n1")
        assert row is not None and row.address == "b" and row.drain_reason == "PSU swap"
        store.set_node_drain("n1", None)
        assert store.get_node("n1").drain_reason is None  # type: ignore[union-attr]
        with pytest.raises(UnknownNode):
            store.set_node_drain("nope", "x")
