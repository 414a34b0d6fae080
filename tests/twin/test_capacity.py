"""Capacity planning: the search finds the fewest added nodes that meet the target."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from tests.twin.builders import snapshot

from fusesched.twin.capacity import CapacityError, Question, plan, run_question
from fusesched.twin.report import capacity_markdown, write_capacity
from fusesched.twin.runner import TwinResult
from fusesched.twin.scenario import Scenario, parse_scenario
from fusesched.twin.snapshot import save


def fake(p95_of_added: dict[int, float] | None = None) -> tuple[list[int], object]:
    calls: list[int] = []

    def runner(pairs: Sequence[tuple[Scenario, int]]) -> list[TwinResult]:
        out = []
        for scenario, seed in pairs:
            added = scenario.nodes.add[-1].count
            calls.append(added)
            p95 = max(0.0, 100.0 - 10.0 * added) + seed  # seeds differ a little
            metrics = {"p95_wait_s": p95}
            out.append(
                TwinResult(
                    scenario.name,
                    seed,
                    metrics,
                    {"q": metrics},
                    {},
                    0.0,
                    None,
                    None,
                    None,
                    4 + added,
                    8 + 4 * added,
                    0.0,
                )
            )
        return out

    return calls, runner


def test_the_search_finds_the_smallest_size_that_meets_the_target() -> None:
    calls, runner = fake()
    question = Question(target_s=35.5, like="gpu-1", queue="q", seeds=(0, 1), max_add=100)
    answer = plan(Scenario(name="now"), question, runner)  # type: ignore[arg-type]
    # p95 = 100 - 10 k + seed, mean over seeds 0, 1: 100.5 - 10 k <= 35.5 from k = 7
    assert answer.added == 7
    assert answer.step(7).p95 == 30.5 and answer.step(6).p95 == 40.5
    assert len(calls) == len(set(calls)) * 2  # no size run twice (two seeds each)
    assert len(set(calls)) < 12  # far fewer than trying every size


def test_a_target_met_already_needs_nothing_and_an_unreachable_one_says_so() -> None:
    _, runner = fake()
    met = plan(Scenario(), Question(target_s=200, like="x"), runner)  # type: ignore[arg-type]
    assert met.added == 0 and [s.added for s in met.steps] == [0]
    never = plan(Scenario(), Question(target_s=-0.0, like="x", max_add=5), runner)  # type: ignore[arg-type]
    assert never.added is None  # 100 - 50 = 50 > 0 at the most nodes allowed
    assert "Not reached" in capacity_markdown(never, "nodes")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"target_s": 1},  # no node type
        {"target_s": 1, "like": "a", "match": {"x": "y"}},
        {"target_s": -1, "like": "a"},
        {"target_s": 1, "like": "a", "seeds": ()},
        {"target_s": 1, "like": "a", "max_add": 0},
    ],
)
def test_bad_questions_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(CapacityError):
        Question(**kwargs)  # type: ignore[arg-type]


def test_a_real_plan_on_a_small_snapshot(tmp_path: object) -> None:
    from pathlib import Path

    folder = Path(str(tmp_path))
    save(snapshot(150), folder / "s.json.gz")
    data = (folder / "s.json.gz").read_bytes()
    base = parse_scenario({"name": "busy", "arrival": {"rate": 6}})
    question = Question(target_s=5.0, like="gpu-1", queue="train", seeds=(0,), max_add=16)
    answer = run_question(base, question, data, workers=1)
    assert answer.added is not None and answer.added > 0
    before = (
        answer.step(answer.added - 1)
        if answer.added - 1 in {s.added for s in answer.steps}
        else None
    )
    assert answer.step(answer.added).p95 <= 5.0
    if before is not None:
        assert before.p95 > 5.0
    path = write_capacity(answer, folder / "out", "plan", "nodes like gpu-1")
    assert "Answer: add" in path.read_text() and (folder / "out" / "capacity.png").exists()
