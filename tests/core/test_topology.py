"""Topology: keeping a gang inside one switch / NVLink domain / rack, required or preferred."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusesched.core.device_specs import Device, device_demand
from fusesched.core.devices import DeviceLedger
from fusesched.core.topology import (
    DomainChoice,
    DomainCodes,
    TopologyMode,
    TopologyRequest,
    TopologyStatus,
    choose_domains,
)
from fusesched.model.node import LABEL_NVLINK, LABEL_RACK, LABEL_SWITCH
from fusesched.model.resources import GPU

REQUIRED = TopologyRequest(LABEL_SWITCH, TopologyMode.REQUIRED)
PREFERRED = TopologyRequest(LABEL_SWITCH, TopologyMode.PREFERRED)


def switches(*names: str | None, key: str = LABEL_SWITCH) -> DomainCodes:
    """One node per name (None: the node has no label)."""
    return DomainCodes.from_labels([{} if n is None else {key: n} for n in names], key)


def choose(
    request: TopologyRequest,
    domains: DomainCodes,
    slots: list[int],
    wanted: int,
    capacity: list[int] | None = None,
    skip: tuple[int, ...] = (),
) -> DomainChoice:
    rows = np.arange(len(slots))
    cap = None if capacity is None else np.array(capacity)
    return choose_domains(request, domains, rows, np.array(slots), wanted, capacity=cap, skip=skip)


def test_domain_codes_from_labels() -> None:
    domains = switches("s2", "s1", None, "s2")
    assert domains.names == ("s1", "s2")
    assert list(domains.codes) == [1, 0, -1, 1]


# ============================================================================ required

# switch a: 3 nodes, b: 2 nodes, c: 1 node
ABC = switches("a", "a", "a", "b", "b", "c")


@pytest.mark.parametrize(
    ("slots", "wanted", "rows", "names"),
    [
        ([2, 2, 2, 4, 4, 1], 6, [0, 1, 2], ("a",)),  # a (6) fits tighter than b (8)
        ([2, 2, 2, 4, 4, 1], 7, [3, 4], ("b",)),  # only b holds 7
        ([2, 2, 2, 4, 4, 1], 1, [5], ("c",)),  # a small job takes the smallest domain
        ([2, 2, 2, 3, 3, 6], 6, [0, 1, 2], ("a",)),  # ties go to the lowest domain
    ],
)
def test_required_takes_the_tightest_domain_that_fits(
    slots: list[int], wanted: int, rows: list[int], names: tuple[str, ...]
) -> None:
    choice = choose(REQUIRED, ABC, slots, wanted)
    assert choice.status is TopologyStatus.FITS
    assert list(choice.rows) == rows
    assert choice.names(ABC) == names and choice.single


def test_required_waits_when_no_domain_has_room_now() -> None:
    capacity = [4, 4, 4, 4, 4, 4]
    choice = choose(REQUIRED, ABC, [2, 2, 2, 4, 0, 4], 9, capacity=capacity)
    assert choice.status is TopologyStatus.WAIT
    assert len(choice.rows) == 0 and "no single" in choice.reason


def test_required_never_when_no_domain_could_ever_hold_it() -> None:
    capacity = [4, 4, 4, 4, 4, 4]  # a holds 12 at most, the cluster 24
    choice = choose(REQUIRED, ABC, capacity, 13, capacity=capacity)
    assert choice.status is TopologyStatus.NEVER
    assert "largest holds 12" in choice.reason


def test_without_capacity_an_impossible_request_only_waits() -> None:
    assert choose(REQUIRED, ABC, [1] * 6, 13).status is TopologyStatus.WAIT


def test_a_node_without_the_label_is_a_domain_of_its_own() -> None:
    domains = switches("a", "a", None, None)
    choice = choose(REQUIRED, domains, [1, 1, 3, 3], 3)
    assert list(choice.rows) == [2]  # one unlabelled node holds the whole gang
    assert choice.names(domains) == ("",)
    # two unlabelled nodes are not one domain
    assert choose(REQUIRED, domains, [1, 1, 3, 3], 4).status is TopologyStatus.WAIT


def test_skip_asks_for_the_next_domain() -> None:
    slots = [2, 2, 2, 4, 4, 1]
    first = choose(REQUIRED, ABC, slots, 5)
    assert first.names(ABC) == ("a",)
    second = choose(REQUIRED, ABC, slots, 5, skip=first.codes)
    assert second.names(ABC) == ("b",)
    assert choose(REQUIRED, ABC, slots, 5, skip=(0, 1)).status is TopologyStatus.WAIT


def test_other_topology_keys_work_alike() -> None:
    for key in (LABEL_NVLINK, LABEL_RACK):
        domains = switches("r1", "r2", "r2", key=key)
        choice = choose(TopologyRequest(key), domains, [4, 2, 2], 4)
        assert choice.names(domains) == ("r1",)


def test_groups_must_all_fit_in_the_domain() -> None:
    # group 0 fits anywhere, group 1 (e.g. GPU workers) only in b
    slots = np.array([[4, 4, 4, 4, 4, 4], [0, 0, 0, 2, 2, 0]])
    choice = choose_domains(REQUIRED, ABC, np.arange(6), slots, [1, 4])
    assert choice.names(ABC) == ("b",)
    with pytest.raises(ValueError, match="do not match"):
        choose_domains(REQUIRED, ABC, np.arange(6), slots, 4)


def test_candidate_rows_are_a_subset_of_the_cluster() -> None:
    rows = np.array([1, 3, 4])  # nodes 0, 2, 5 filtered out by labels or state
    choice = choose_domains(REQUIRED, ABC, rows, np.array([3, 1, 1]), 2)
    assert list(choice.rows) == [3, 4]  # a offers 3 through row 1 alone, b fits tighter


# ============================================================================ preferred


def test_preferred_uses_one_domain_when_one_fits() -> None:
    choice = choose(PREFERRED, ABC, [2, 2, 2, 4, 4, 1], 8)
    assert choice.status is TopologyStatus.FITS and choice.single
    assert choice.names(ABC) == ("b",)


def test_preferred_spans_the_fewest_domains() -> None:
    # 10 tasks: b (8) is largest; the rest (2) goes to the smallest domain covering it (a, 6)
    choice = choose(PREFERRED, ABC, [2, 2, 2, 4, 4, 1], 10)
    assert choice.status is TopologyStatus.FITS and not choice.single
    assert choice.names(ABC) == ("b", "a")
    assert list(choice.rows) == [0, 1, 2, 3, 4]
    # 9 tasks: b + c (1) suffice, a stays whole
    assert choose(PREFERRED, ABC, [2, 2, 2, 4, 4, 1], 9).names(ABC) == ("b", "c")


def test_preferred_waits_or_never_when_the_cluster_is_too_small() -> None:
    capacity = [2, 2, 2, 4, 4, 1]
    assert choose(PREFERRED, ABC, [0, 0, 0, 4, 4, 1], 12).status is TopologyStatus.WAIT
    never = choose(PREFERRED, ABC, capacity, 16, capacity=capacity)
    assert never.status is TopologyStatus.NEVER and "at most 15" in never.reason


# ============================================================================ with devices


def test_a_multi_node_gpu_job_in_one_switch() -> None:
    """2 tasks × 8 GPUs, same switch required: s1 has two 8-GPU nodes but one is half used,
    s2 has two free 8-GPU nodes."""
    book = DeviceLedger()
    for row in range(4):
        book.add_node(row, [Device(GPU, i, "H100") for i in range(8)])
    demand, half = device_demand({GPU: 8}), device_demand({GPU: 4})
    assert demand is not None and half is not None
    book.assign(0, half)
    domains = switches("s1", "s1", "s2", "s2")
    rows = np.arange(4)
    slots = book.slots(rows, demand)
    choice = choose_domains(
        REQUIRED, domains, rows, slots, 2, capacity=book.capacity_slots(rows, demand)
    )
    assert choice.names(domains) == ("s2",)
    placed = [book.assign(int(row), demand) for row in choice.rows]
    assert [a.tasks[0].row for a in placed] == [2, 3]
    book.check()


# ============================================================================ property


@settings(max_examples=200, deadline=None)
@given(
    nodes=st.lists(
        st.tuples(st.sampled_from([None, "a", "b", "c", "d"]), st.integers(0, 5)),
        min_size=1,
        max_size=12,
    ),
    wanted=st.integers(1, 20),
    preferred=st.booleans(),
)
def test_choice_matches_brute_force(
    nodes: list[tuple[str | None, int]], wanted: int, preferred: bool
) -> None:
    domains = switches(*(name for name, _ in nodes))
    slots = [s for _, s in nodes]
    request = PREFERRED if preferred else REQUIRED
    choice = choose(request, domains, slots, wanted)
    # the domains as the brute force sees them: unlabelled nodes alone
    groups: dict[object, list[int]] = {}
    for row, (name, _) in enumerate(nodes):
        groups.setdefault(name if name is not None else ("row", row), []).append(row)
    room = {key: sum(slots[r] for r in rows) for key, rows in groups.items()}
    fitting = [key for key, size in room.items() if size >= wanted]
    if fitting:
        assert choice.status is TopologyStatus.FITS and choice.single
        chosen = [k for k, rows in groups.items() if list(choice.rows) == rows]
        assert len(chosen) == 1 and room[chosen[0]] == min(room[k] for k in fitting)
    elif not preferred or sum(slots) < wanted:
        assert choice.status is TopologyStatus.WAIT
    else:
        assert choice.status is TopologyStatus.FITS
        picked = set(choice.rows.tolist())
        assert sum(slots[r] for r in picked) >= wanted
        # whole domains only, and no fewer domains would do
        used = [k for k, rows in groups.items() if picked & set(rows)]
        assert all(set(groups[k]) <= picked for k in used)
        fewest = min(
            n
            for n in range(1, len(groups) + 1)
            for combo in itertools.combinations(room.values(), n)
            if sum(combo) >= wanted
        )
        assert len(used) == fewest == len(choice.codes)
