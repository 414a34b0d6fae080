"""Names checked by anchored patterns are checked whole: ``$`` also matches before a final
newline, so ``re.match`` let ``"name\\n"`` through (a node, a reservation, an environment
variable, a label, a resource); every such check is a full match."""

from __future__ import annotations

import pytest

from fusesched.api.wire import NodeInventory
from fusesched.controller.agents import _check_node_identity
from fusesched.model.reservation import Reservation
from fusesched.submit.errors import SubmitError
from fusesched.submit.request import JobRequest


def request(**extra: object) -> dict[str, object]:
    return {"groups": [{"resources": {"cpu": "1"}, "argv": ["true"]}], **extra}


@pytest.mark.parametrize(
    "body",
    [
        {"groups": [{"resources": {"cpu": "1"}, "argv": ["true"], "env": {"FOO\n": "1"}}]},
        request(labels={"team\n": "a"}),
        request(labels={"team": "a\n"}),
        request(pool="gpu\n"),
    ],
)
def test_request_names_with_a_final_newline_are_refused(body: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        JobRequest.model_validate(body)


def test_a_node_named_with_a_final_newline_does_not_register() -> None:
    with pytest.raises(SubmitError, match="invalid node name"):
        _check_node_identity(NodeInventory(name="n1\n", address="127.0.0.1", resources={}))
    with pytest.raises(SubmitError, match="invalid node address"):
        _check_node_identity(NodeInventory(name="n1", address="127.0.0.1\n", resources={}))


def test_model_names_with_a_final_newline_are_refused() -> None:
    with pytest.raises(ValueError):
        Reservation("maint\n", ("n1",), 0.0, 10.0)
