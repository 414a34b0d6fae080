"""The reason of a job its queue's quota parked (core/quota_reasons.py): the queue's use
against its nominal quota, what the job needs, and why its cohort gives it no more — from a
live core and straight from a ledger."""

from __future__ import annotations

import pytest

from fusesched.core.pending_reasons import take_reasons
from fusesched.core.quota import Admission, QuotaLedger
from fusesched.core.quota_reasons import quota_reason
from fusesched.model.events import JobSubmitted
from fusesched.model.job import JobSpec
from fusesched.model.resources import GPU, Resources
from fusesched.model.tenancy import EXAMPLE_YAML, TenancyConfig

from .test_tenancy_core import core_with, gjob, started, tenancy

Quotas = dict[str, tuple[int, int | None, int | None]]


@pytest.mark.parametrize(
    ("quotas", "cohort", "jobs", "said"),
    [
        (  # a queue of its own: nothing to borrow
            {"a": (2, None, None), "b": (4, None, None)},
            None,
            [gjob("a1", "a", 2), gjob("a2", "a", 2)],
            "QuotaExceeded: queue a gpu 2/2, needs 2; no cohort to borrow from",
        ),
        (  # b's 2 GPUs are borrowed already
            {"a": (2, None, None), "b": (2, None, None)},
            "c",
            [gjob("a1", "a", 2), gjob("a2", "a", 2), gjob("a3", "a", 2)],
            "QuotaExceeded: queue a gpu 4/2, needs 2; cohort c has none to lend",
        ),
        (  # one of b's 3 GPUs left
            {"a": (2, None, None), "b": (3, None, None)},
            "c",
            [gjob("a1", "a", 2), gjob("a2", "a", 2), gjob("a3", "a", 2)],
            "QuotaExceeded: queue a gpu 4/2, needs 2; cohort c lends only 1",
        ),
        (  # b has 4 to lend, a may borrow 1
            {"a": (2, 1, None), "b": (4, None, None)},
            "c",
            [gjob("a1", "a", 2), gjob("a2", "a", 1), gjob("a3", "a", 1)],
            "QuotaExceeded: queue a gpu 3/2, needs 1; borrowing capped at 1",
        ),
        (  # gold is not preemptible: it never borrows
            {"a": (2, None, None), "b": (4, None, None)},
            "c",
            [gjob("a1", "a", 2, "gold"), gjob("a2", "a", 2, "gold")],
            "QuotaExceeded: queue a gpu 2/2, needs 2; tier gold may not borrow",
        ),
    ],
)
def test_a_parked_job_says_whose_quota_and_why_no_more_comes(
    quotas: Quotas, cohort: str | None, jobs: list[JobSpec], said: str
) -> None:
    core = core_with(tenancy(quotas, cohort=cohort))
    out = core.step(0, [JobSubmitted(spec) for spec in jobs])
    assert started(out) == [spec.id for spec in jobs[:-1]]
    assert take_reasons(core) == {jobs[-1].id: said}


def test_a_queue_whose_quota_is_lent_out_reclaims_it() -> None:
    core = core_with(tenancy({"a": (2, None, None), "b": (2, None, None)}))
    assert started(core.step(0, [JobSubmitted(gjob("b1", "b", 4))])) == ["b1"]  # (borrows 2)
    core.step(1, [JobSubmitted(gjob("a1", "a", 2, at=1))])  # (b1 is asked to go)
    assert take_reasons(core) == {
        "a1": "QuotaExceeded: queue a gpu 0/2, needs 2; its quota is lent out: reclaiming"
    }


def _ledger(config: TenancyConfig, queue: str, gpus: int) -> QuotaLedger:
    ledger = QuotaLedger(config)
    verdict = ledger.check(queue, Resources({GPU: gpus}))
    assert verdict.ok and verdict.assignment is not None
    ledger.admit("running", verdict.assignment)
    return ledger


def test_a_job_that_may_not_borrow_now_says_so() -> None:
    """Borrowing would fit, but the job backs off after a preemption (or its cohort
    reclaims): the gate asked the ledger without borrowing."""
    config = tenancy({"a": (2, None, None), "b": (4, None, None)})
    ledger = _ledger(config, "a", 2)
    verdict = ledger.check("a", Resources({GPU: 2}), may_borrow=False)
    assert quota_reason(ledger, verdict, config.tier("silver")) == (
        "QuotaExceeded: queue a gpu 2/2, needs 2; may not borrow now"
    )


def test_the_flavour_is_named_when_the_queue_has_several() -> None:
    config = TenancyConfig.from_yaml(EXAMPLE_YAML)
    ledger = _ledger(config, "ml-train", 16)  # (all its A100s)
    verdict = ledger.check("ml-train", Resources({GPU: 40}))
    assert quota_reason(ledger, verdict, config.tier("silver")) == (
        "QuotaExceeded: queue ml-train a100-x86:gpu 16/16, needs 40; borrowing capped at 8"
    )


def test_what_the_ledger_cannot_explain_keeps_its_words() -> None:
    config = tenancy({"a": (2, None, None)})
    ledger = QuotaLedger(config)
    no_flavour = Admission(False, "a", None, {}, "gpu: excluded by the job's node constraints")
    assert quota_reason(ledger, no_flavour, None) == (
        "QuotaExceeded: queue a (gpu: excluded by the job's node constraints)"
    )
    unknown = Admission(False, "nope", ledger.check("a", Resources({GPU: 1})).assignment)
    assert quota_reason(ledger, unknown, None) == "QuotaExceeded: queue nope"
    fits = ledger.check("a", Resources({GPU: 1}))  # (freed meanwhile: nothing is short now)
    assert quota_reason(ledger, fits, None) == "QuotaExceeded: queue a"
