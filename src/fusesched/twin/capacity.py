"""Capacity planning: the fewest added nodes of one type that keep a queue's 95th-percentile
wait below a target.

Each size (nodes added to the base scenario) runs over every seed; a size passes when the
mean over seeds of the queue's p95 wait is at most the target. The search assumes more nodes
never make the wait worse: it gallops (1, 2, 4, … added) until a size passes, then narrows
the bracket. Every round evaluates ``batch`` sizes at once (sizes × seeds in parallel), so a
round uses every core; sizes already run are not run again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from fusesched.twin.runner import RunOptions, TwinResult
from fusesched.twin.scenario import AddNodes, NodeChanges, Scenario

Runner = Callable[[Sequence[tuple[Scenario, int]]], list[TwinResult]]


class CapacityError(ValueError):
    pass


@dataclass(frozen=True)
class Question:
    """How many nodes like ``like`` (or matching ``match``) keep ``queue``'s p95 wait (all
    jobs' when None) at most ``target_s``?"""

    target_s: float
    like: str | None = None
    match: dict[str, str] | None = None
    queue: str | None = None
    seeds: tuple[int, ...] = (0, 1, 2)
    max_add: int = 1024
    batch: int = 4

    def __post_init__(self) -> None:
        if (self.like is None) == (self.match is None):
            raise CapacityError("name a node type: either like (a node) or match (labels)")
        if not self.target_s >= 0:
            raise CapacityError("the target wait must not be negative")
        if not self.seeds:
            raise CapacityError("at least one seed")
        if self.max_add < 1 or self.batch < 1:
            raise CapacityError("max_add and batch must be at least 1")


@dataclass
class Step:
    added: int
    nodes: int
    gpus: int
    p95_by_seed: list[float]

    @property
    def p95(self) -> float:
        return float(np.mean(self.p95_by_seed))


@dataclass
class Answer:
    question: Question
    base: str
    steps: list[Step] = field(default_factory=list)  # every size run, by size
    added: int | None = None  # the answer (None: not reached within max_add)

    def step(self, added: int) -> Step:
        return next(s for s in self.steps if s.added == added)


def sized(base: Scenario, question: Question, added: int) -> Scenario:
    """``base`` with ``added`` more nodes of the question's type."""
    extra = AddNodes(count=added, like=question.like, match=question.match)
    nodes = NodeChanges(add=[*base.nodes.add, extra], remove=list(base.nodes.remove))
    return base.model_copy(update={"nodes": nodes, "name": f"{base.name}+{added}"})


def p95_of(result: TwinResult, queue: str | None) -> float:
    if queue is None:
        return float(result.overall["p95_wait_s"])
    metrics = result.queues.get(queue)
    if metrics is None:
        raise CapacityError(f"queue {queue!r} has no jobs in the snapshot")
    return float(metrics["p95_wait_s"])


def plan(base: Scenario, question: Question, runner: Runner) -> Answer:
    """Search the size; ``runner`` runs (scenario, seed) pairs (in parallel) in order."""
    answer = Answer(question, base.name)
    done: dict[int, Step] = {}

    def evaluate(sizes: Sequence[int]) -> None:
        todo = [k for k in dict.fromkeys(sizes) if k not in done]
        if not todo:
            return
        pairs = [(sized(base, question, k), seed) for k in todo for seed in question.seeds]
        results = runner(pairs)
        n = len(question.seeds)
        for i, k in enumerate(todo):
            chunk = results[i * n : (i + 1) * n]
            done[k] = Step(
                k, chunk[0].nodes, chunk[0].gpus, [p95_of(r, question.queue) for r in chunk]
            )

    def ok(k: int) -> bool:
        return done[k].p95 <= question.target_s

    evaluate([0])
    if ok(0):
        answer.added = 0
    else:
        lo, hi = 0, None  # lo fails; hi passes
        k = 1
        while hi is None and lo < question.max_add:  # gallop, `batch` sizes a round
            sizes: list[int] = []
            while len(sizes) < question.batch and k <= question.max_add:
                sizes.append(k)
                k = k * 2
            if sizes[-1] < question.max_add and k > question.max_add:
                sizes.append(question.max_add)
            evaluate(sizes)
            for size in sorted(sizes):
                if ok(size):
                    hi = size
                    break
                lo = size
            if k > question.max_add and hi is None:
                break
        while hi is not None and hi - lo > 1:  # narrow: `batch` interior sizes a round
            inner = np.linspace(lo, hi, question.batch + 2)[1:-1]
            sizes = sorted({round(float(x)) for x in inner} - {lo, hi}) or [(lo + hi) // 2]
            evaluate(sizes)
            for size in sizes:
                if ok(size):
                    hi = size
                    break
                lo = size
        answer.added = hi
    answer.steps = [done[k] for k in sorted(done)]
    return answer


def run_question(
    base: Scenario,
    question: Question,
    snapshot: bytes,
    *,
    workers: int | None = None,
    ray_address: str | None = None,
) -> Answer:
    """:func:`plan` with the sweeps run by :func:`fusesched.twin.parallel.run_all`."""
    from fusesched.twin.parallel import Task, run_all

    options = RunOptions(energy=False, fragmentation=False)

    def runner(pairs: Sequence[tuple[Scenario, int]]) -> list[TwinResult]:
        tasks = [Task(s, seed, options) for s, seed in pairs]
        return run_all(snapshot, tasks, workers=workers, ray_address=ray_address)

    return plan(base, question, runner)
