"""Data-aware placement in the core: prefer nodes caching a job's datasets, weighed against
packing, never waiting longer than the configured time."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.builders import Run, exited, job, node, node_state, nodes, run_script, submit

from fusesched.core.datasets import DataIndex
from fusesched.model.events import NodeDatasets, ReserveJob, StartJob
from fusesched.model.job import Dataset, JobSpec
from fusesched.policies.registry import CoreConfig, PolicyError

GIB = 2**30
IMAGENET = Dataset("imagenet", "/shared/imagenet", 150 * GIB)
TEXT = Dataset("text", "/shared/text", 50 * GIB)


def with_data(spec: JobSpec, *datasets: Dataset) -> JobSpec:
    return replace(spec, datasets=datasets)


def placed_on(run: Run, job_id: str) -> list[str]:
    start = run.starts()[job_id]
    assert isinstance(start, StartJob)
    return sorted({p.node for g in start.groups for p in g.tasks()})


def test_a_job_goes_to_the_node_that_caches_its_data() -> None:
    spec = with_data(job("a").tasks(1, cpu=1).build(), IMAGENET)
    run = run_script(
        nodes(4, cpu=4),
        [(0, [NodeDatasets("n2", frozenset({"imagenet"}))]), (1, submit(spec))],
    )
    assert placed_on(run, "a") == ["n2"]
    plain = run_script(nodes(4, cpu=4), [(0, submit(spec))])  # nobody caches it: first fit
    assert placed_on(plain, "a") == ["n0"]


def test_locality_is_weighed_against_packing() -> None:
    """best-fit wants the nearly full n0; the data is on the empty n1. A small weight keeps
    packing, the default weight prefers the data."""
    cluster = [node("n0").cpu(4).build(), node("n1").cpu(4).build()]
    filler = job("filler").tasks(3, cpu=1).build()
    spec = with_data(job("a").tasks(1, cpu=1).build(), IMAGENET)

    def where(weight: float) -> list[str]:
        run = run_script(
            cluster,
            [
                (0, [*submit(filler), NodeDatasets("n1", frozenset({"imagenet"}))]),
                (1, submit(spec)),
            ],
            placement="best-fit",
            data_locality_weight=weight,
        )
        assert placed_on(run, "filler") == ["n0"]
        return placed_on(run, "a")

    assert where(0.0) == ["n0"]
    assert where(0.01) == ["n0"]  # 0.01 of locality is worth less than the packing gain
    assert where(1.0) == ["n1"]


def test_a_gang_prefers_nodes_that_together_hold_its_data() -> None:
    spec = with_data(job("g").tasks(2, cpu=4).build(), IMAGENET, TEXT)
    run = run_script(
        nodes(4, cpu=4),
        [
            (
                0,
                [
                    NodeDatasets("n1", frozenset({"imagenet"})),
                    NodeDatasets("n3", frozenset({"text"})),
                ],
            ),
            (1, submit(spec)),
        ],
    )
    assert placed_on(run, "g") == ["n1", "n3"]


def test_the_biggest_share_of_the_bytes_wins() -> None:
    spec = with_data(job("a").tasks(1, cpu=1).build(), IMAGENET, TEXT)
    run = run_script(
        nodes(3, cpu=4),
        [
            (
                0,
                [
                    NodeDatasets("n0", frozenset({"text"})),
                    NodeDatasets("n2", frozenset({"imagenet"})),
                ],
            ),
            (1, submit(spec)),
        ],
    )
    assert placed_on(run, "a") == ["n2"]  # 150 GiB of 200 there, 50 on n0


def _busy_holder(wait_s: float) -> Run:
    """n0 caches the data but is full until t=50; n1 is free."""
    busy = job("busy").tasks(1, cpu=4).walltime(50).build()
    spec = with_data(job("a").tasks(1, cpu=1).at(10).build(), IMAGENET)
    return run_script(
        nodes(2, cpu=4),
        [
            (0, [*submit(busy), NodeDatasets("n0", frozenset({"imagenet"}))]),
            (10, submit(spec)),
        ],
        data_locality_wait_s=wait_s,
    )


def test_without_a_wait_the_job_does_not_wait_for_its_data() -> None:
    run = _busy_holder(0.0)
    assert placed_on(run, "a") == ["n1"]
    assert run.start_times()["a"] == 10


def test_delay_scheduling_waits_at_most_the_configured_time() -> None:
    run = _busy_holder(30.0)
    assert "a" not in run.starts()
    assert run.core.next_wakeup() == 40.0  # queued at 10, waits 30 s at most
    run.step(40.0)
    assert placed_on(run, "a") == ["n1"]
    assert run.start_times()["a"] == 40.0


def test_delay_scheduling_takes_the_holder_when_it_frees_in_time() -> None:
    run = _busy_holder(60.0)
    run.step(50.0, exited("busy"))
    assert placed_on(run, "a") == ["n0"]
    assert run.start_times()["a"] == 50.0


def test_the_reservation_names_the_nodes_to_stage_onto() -> None:
    first = job("first").tasks(2, cpu=4).walltime(100).build()
    big = with_data(job("big").tasks(2, cpu=4).walltime(100).build(), IMAGENET)
    run = run_script(
        [*nodes(2, cpu=4), node("gpu0").cpu(4).gpu(1).build()],
        [(0, submit(first)), (1, submit(big))],
    )
    (reserve,) = [d for _, d in run.decisions if isinstance(d, ReserveJob)]
    assert reserve.job_id == "big" and reserve.start_time == 100.0
    assert len(reserve.nodes) == 2 and set(reserve.nodes) <= {"n0", "n1", "gpu0"}


def test_reports_replace_what_a_node_held() -> None:
    index = DataIndex()
    assert index.report(0, frozenset({"a", "b"}))
    assert not index.report(0, frozenset({"a", "b"}))
    assert index.report(0, frozenset({"b"}))
    assert index.holders("a") == frozenset() and index.holders("b") == {0}
    assert index.locality((Dataset("a", "/x"),), 2) is None


def test_bad_reports_and_settings_are_refused() -> None:
    run = run_script(nodes(1, cpu=1), [])
    with pytest.raises(KeyError, match="unknown node"):
        run.core.handle(NodeDatasets("nope", frozenset()), 0.0)
    with pytest.raises(PolicyError, match="data_locality_weight"):
        CoreConfig(data_locality_weight=-1)
    with pytest.raises(PolicyError, match="data_locality_wait_s"):
        CoreConfig(data_locality_wait_s=float("inf"))


@pytest.mark.parametrize(
    ("name", "message"),
    [("9lives", "letters, digits"), ("with-dash", "letters, digits"), ("", "letters")],
)
def test_dataset_names_must_make_environment_variables(name: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Dataset(name, "/shared/x")


def test_dataset_names_are_unique_per_job() -> None:
    with pytest.raises(ValueError, match="unique"):
        with_data(job("a").build(), IMAGENET, Dataset("IMAGENET", "/elsewhere"))
    assert IMAGENET.env_name == "FUSESCHED_DATA_IMAGENET"


def test_a_job_waiting_for_its_data_does_not_hold_back_its_shape_in_backfill() -> None:
    """a waits for the busy n0 (its data's node); b, of the same shape and without data,
    fits on n1 now and is backfilled although a failed before it in the scan."""
    busy = job("busy").tasks(1, cpu=4).walltime(100).build()
    big = job("big").tasks(3, cpu=4).walltime(100).build()
    a = with_data(job("a").tasks(1, cpu=1).walltime(10).build(), IMAGENET)
    b = job("b").tasks(1, cpu=1).walltime(10).build()
    run = run_script(
        nodes(3, cpu=4),
        [
            (0, [*submit(busy), NodeDatasets("n0", frozenset({"imagenet"}))]),
            (1, submit(big)),
            (2, submit(a, b)),
        ],
        backfill="easy",
        data_locality_wait_s=60,
    )
    assert run.start_times()["b"] == 2
    assert "a" not in run.start_times()


def test_no_wait_for_data_on_a_node_that_is_down() -> None:
    spec = with_data(job("a").tasks(1, cpu=1).at(1).build(), IMAGENET)
    run = run_script(
        nodes(2, cpu=4),
        [
            (0, [NodeDatasets("n0", frozenset({"imagenet"})), node_state("n0", "down")]),
            (1, submit(spec)),
        ],
        data_locality_wait_s=60,
    )
    assert run.start_times()["a"] == 1 and placed_on(run, "a") == ["n1"]
