"""The device ledger: per-device GPU/MIG/accelerator accounting, by example and by property."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from fusesched.core.device_specs import (
    WHOLE,
    Device,
    DeviceDemand,
    DeviceError,
    DeviceRequest,
    aggregate_capacity,
    device_demand,
    devices_from_capacity,
    fill_models,
    is_device_kind,
    mig_resource,
    models_from_placement,
    with_device_capacity,
)
from fusesched.core.devices import DeviceAssignment, DeviceLedger, DevicesUnavailable
from fusesched.model.job import LabelOp, LabelRequirement, Placement
from fusesched.model.node import LABEL_GPU_MODEL
from fusesched.model.resources import CPU, GPU, GPU_MILLI, Resources

AMD = "amd.com/gpu"
MIG_1G = mig_resource("1g.10gb")
MIG_3G = mig_resource("3g.40gb")


def gpus(n: int, model: str = "A100", links: Sequence[str] = ()) -> list[Device]:
    """``n`` whole NVIDIA GPUs 0..n-1 (``links[i]``: the NVLink island of GPU i)."""
    return [
        Device(GPU, i, model, f"GPU-{model}-{i}", link=links[i] if links else "") for i in range(n)
    ]


def ledger(*nodes: Sequence[Device]) -> DeviceLedger:
    out = DeviceLedger(width=2)  # small on purpose: adding nodes must widen it
    for row, devices in enumerate(nodes):
        out.add_node(row, devices)
    return out


def need(resources: dict[str, int], models: Sequence[str] = ()) -> DeviceDemand:
    demand = device_demand(resources, models)
    assert demand is not None
    return demand


def whole(k: int = 1, models: Sequence[str] = ()) -> DeviceDemand:
    return need({GPU: k}, models)


def share(milli: int) -> DeviceDemand:
    return need({GPU_MILLI: milli})


def indices(assignment: DeviceAssignment) -> list[tuple[int, ...]]:
    return [task.indices for task in assignment.tasks]


def slots_of(book: DeviceLedger, demand: DeviceDemand) -> list[int]:
    return [int(x) for x in book.slots(np.arange(book.size), demand)]


# ============================================================================ descriptions


def test_device_kinds() -> None:
    for name in (GPU, MIG_1G, AMD, "gpu.intel.com/i915", "google.com/tpu", "habana.ai/gaudi"):
        assert is_device_kind(name), name
    for name in (GPU_MILLI, CPU, "memory", "fpga", "rdma", "gpu"):
        assert not is_device_kind(name), name


def test_mig_device_takes_its_profile_from_the_kind() -> None:
    dev = Device(MIG_1G, 3, "A100", "MIG-abc")
    assert dev.mig_profile == "1g.10gb"
    assert Device.mig(3, "1g.10gb", "MIG-abc", "A100") == dev
    assert dev.visible_id == "MIG-abc"
    assert Device(GPU, 2).visible_id == "2"
    assert not dev.shareable and Device(GPU, 0).shareable and not Device(AMD, 0).shareable


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Device("fpga", 0), "not a device"),
        (lambda: Device(GPU_MILLI, 0), "not a device"),
        (lambda: Device(GPU, -1), "negative"),
        (lambda: Device(GPU, 0, mig_profile="1g.10gb"), "counts towards"),
        (lambda: Device(MIG_1G, 0, mig_profile="2g.20gb"), "does not match"),
        (lambda: Device.mig(0, "big"), "invalid MIG profile"),
        (lambda: DeviceRequest(GPU, count=0), "at least one"),
        (lambda: DeviceRequest(GPU, count=2, milli=500), "exactly one device"),
        (lambda: DeviceRequest(AMD, milli=500), "cannot be shared"),
        (lambda: DeviceRequest(GPU, milli=1001), "a share is"),
        (lambda: DeviceDemand(()), "at least one request"),
        (lambda: DeviceDemand((DeviceRequest(GPU), DeviceRequest(GPU, 2))), "one request per"),
        (lambda: device_demand({GPU: 1, GPU_MILLI: 500}), "both"),
        (lambda: device_demand({GPU_MILLI: 1500}), "share of one GPU"),
    ],
)
def test_invalid_descriptions_are_refused(make: object, message: str) -> None:
    assert callable(make)
    with pytest.raises(DeviceError, match=message):
        make()


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        ({CPU: 4000}, None),
        ({GPU: 2, CPU: 1000}, (DeviceRequest(GPU, 2),)),
        ({GPU_MILLI: 500}, (DeviceRequest(GPU, 1, 500),)),
        ({GPU_MILLI: 1000}, (DeviceRequest(GPU, 1),)),  # a full share is a whole GPU
        ({MIG_1G: 2}, (DeviceRequest(MIG_1G, 2),)),
        ({AMD: 1, "fpga": 1}, (DeviceRequest(AMD, 1),)),
    ],
)
def test_device_demand_from_task_resources(
    resources: dict[str, int], expected: tuple[DeviceRequest, ...] | None
) -> None:
    demand = device_demand(resources)
    assert (demand.requests if demand else None) == expected


def test_demand_in_the_aggregate_columns() -> None:
    assert whole(2).aggregate() == Resources({GPU: 2, GPU_MILLI: 2000})
    assert share(300).aggregate() == Resources({GPU_MILLI: 300})
    assert need({MIG_1G: 2, AMD: 1}).aggregate() == Resources({MIG_1G: 2, AMD: 1})


def test_models_from_placement() -> None:
    assert models_from_placement(Placement()) == ()
    assert models_from_placement(Placement(node_selector={LABEL_GPU_MODEL: "V100"})) == ("V100",)
    either = LabelRequirement(LABEL_GPU_MODEL, LabelOp.IN, ("V100", "A100"))
    assert models_from_placement(Placement(required=(either,))) == ("A100", "V100")
    both = Placement(node_selector={LABEL_GPU_MODEL: "A100"}, required=(either,))
    assert models_from_placement(both) == ("A100",)


# ============================================================================ aggregates


def test_aggregate_capacity_counts_devices_and_shares() -> None:
    devices = [*gpus(2), Device.mig(2, "1g.10gb", "MIG-0"), Device(AMD, 0)]
    assert aggregate_capacity(devices) == Resources({GPU: 2, GPU_MILLI: 2000, MIG_1G: 1, AMD: 1})
    declared = Resources({CPU: 8000, GPU: 2})
    assert with_device_capacity(declared, devices) == Resources(
        {CPU: 8000, GPU: 2, GPU_MILLI: 2000, MIG_1G: 1, AMD: 1}
    )
    with pytest.raises(DeviceError, match="devices give 2"):
        with_device_capacity(Resources({GPU: 4}), devices)


def test_devices_from_declared_counts() -> None:
    devices = devices_from_capacity({CPU: 8000, GPU: 2, MIG_1G: 2}, {LABEL_GPU_MODEL: "A100"})
    assert [(d.kind, d.index, d.model) for d in devices] == [
        (GPU, 0, "A100"),
        (GPU, 1, "A100"),
        (MIG_1G, -1, "A100"),
        (MIG_1G, -1, "A100"),
    ]
    assert aggregate_capacity(devices) == Resources({GPU: 2, GPU_MILLI: 2000, MIG_1G: 2})


def test_devices_without_a_model_take_the_node_label() -> None:
    reported = [Device(GPU, 0), Device(GPU, 1, "A100")]
    filled = fill_models(reported, {LABEL_GPU_MODEL: "V100"})
    assert [d.model for d in filled] == ["V100", "A100"]
    assert fill_models(reported, {}) == reported


def test_aggregate_free_follows_the_assignments() -> None:
    book = ledger(gpus(4))
    assert book.aggregate_free(0) == aggregate_capacity(gpus(4))
    book.assign(0, whole(2))
    book.assign(0, share(300))
    # whole GPUs leave the GPU column; a share only takes its milli
    assert book.aggregate_free(0) == Resources({GPU: 2, GPU_MILLI: 1700})


# ============================================================================ fractional


def test_two_halves_share_one_gpu_and_leave_the_other_whole() -> None:
    book = ledger(gpus(2))
    first = book.assign(0, share(500))
    second = book.assign(0, share(500))
    assert indices(first) == indices(second) == [(0,)]
    assert list(book.free_milli(0)) == [0, WHOLE]
    assert slots_of(book, whole()) == [1]
    book.check()


def test_a_share_does_not_fit_a_device_with_less_free() -> None:
    book = ledger(gpus(1))
    book.assign(0, share(500))
    assert slots_of(book, share(600)) == [0]
    with pytest.raises(DevicesUnavailable):
        book.assign(0, share(600))
    assert slots_of(book, share(500)) == [1]


def test_shares_go_to_the_tightest_device_that_fits() -> None:
    book = ledger(gpus(3))
    book.assign(0, share(700))  # GPU 0: 300 free
    book.assign(0, share(300))  # tightest is GPU 0 again: now full
    book.assign(0, share(400))  # GPU 1: 600 free
    placed = book.assign(0, share(200), count=4)
    # best fit: GPU 1 (600 free) takes three, then the whole GPU 2 takes one
    assert indices(placed) == [(1,), (1,), (1,), (2,)]
    assert list(book.free_milli(0)) == [0, 0, 800]
    assert slots_of(book, share(200)) == [4]


def test_whole_gpus_never_land_on_a_shared_device() -> None:
    book = ledger(gpus(2))
    book.assign(0, share(100))
    assert slots_of(book, whole(1)) == [1]
    assert slots_of(book, whole(2)) == [0]
    assert indices(book.assign(0, whole(1))) == [(1,)]
    with pytest.raises(DevicesUnavailable):
        book.assign(0, whole(1))
    book.check()


def test_shares_never_land_on_a_whole_held_device() -> None:
    book = ledger(gpus(1))
    book.assign(0, whole(1))
    assert slots_of(book, share(1)) == [0]


def test_task_slots_for_many_tasks_per_node() -> None:
    book = ledger(gpus(2), gpus(8), [])
    assert slots_of(book, share(300)) == [6, 24, 0]
    assert slots_of(book, whole(3)) == [0, 2, 0]
    assert list(book.fits(np.arange(3), whole(3), count=2)) == [False, True, False]
    assert list(book.capacity_slots(np.arange(3), share(300))) == [6, 24, 0]


# ============================================================================ multi-GPU


def test_multi_gpu_tasks_take_whole_devices_on_one_node() -> None:
    book = ledger(gpus(4), gpus(8))
    assert slots_of(book, whole(4)) == [1, 2]
    placed = book.assign(1, whole(4), count=2)
    assert indices(placed) == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert all(task.row == 1 for task in placed.tasks)
    assert placed.tasks[0].milli == (WHOLE,) * 4
    assert placed.tasks[1].cuda_visible_devices == "4,5,6,7"
    assert slots_of(book, whole(1)) == [4, 0]


def test_multi_gpu_tasks_prefer_one_nvlink_island() -> None:
    links = ["a"] * 4 + ["b"] * 4
    book = ledger(gpus(8, links=links))
    assert indices(book.assign(0, whole(2))) == [(0, 1)]  # island a (ties: lowest)
    # island a has 2 free, b has 4: a 2-GPU task takes the tightest island that fits
    assert indices(book.assign(0, whole(2))) == [(2, 3)]
    book.release(book.assign(0, whole(1)))
    # a 4-GPU task fits only island b
    assert indices(book.assign(0, whole(4))) == [(4, 5, 6, 7)]


def test_a_task_larger_than_any_island_spans_the_fewest() -> None:
    links = ["a", "a", "b", "b", "b", "c", "c", "c"]
    book = ledger(gpus(8, links=links))
    # 5 GPUs: all of one 3-GPU island (b, the first of the largest) + the tightest for 2 (a)
    assert indices(book.assign(0, whole(5))) == [(0, 1, 2, 3, 4)]
    assert indices(book.assign(0, whole(3))) == [(5, 6, 7)]


def test_without_link_information_devices_go_lowest_index_first() -> None:
    book = ledger([Device(GPU, i) for i in (3, 1, 2, 0)])  # reported out of order
    assert indices(book.assign(0, whole(2))) == [(0, 1)]


# ============================================================================ models


def test_model_constraint_selects_nodes_and_devices() -> None:
    book = ledger(
        gpus(4, "V100"), gpus(4, "A100"), [*gpus(2, "V100"), Device(GPU, 2, "A100", "GPU-A100-2")]
    )
    assert slots_of(book, whole(1, ["A100"])) == [0, 4, 1]
    assert slots_of(book, whole(1, ["V100"])) == [4, 0, 2]
    assert slots_of(book, whole(1, ["H100"])) == [0, 0, 0]
    assert slots_of(book, whole(1, ["V100", "A100"])) == [4, 4, 3]
    with pytest.raises(DevicesUnavailable):
        book.assign(0, whole(1, ["A100"]))
    placed = book.assign(2, whole(1, ["A100"]))
    assert indices(placed) == [(2,)] and placed.tasks[0].uuids == ("GPU-A100-2",)


def test_model_constraint_applies_to_shares() -> None:
    book = ledger(gpus(1, "V100"), gpus(1, "A100"))
    assert slots_of(book, need({GPU_MILLI: 250}, ["A100"])) == [0, 4]


# ============================================================================ MIG and vendors


def mig_node() -> list[Device]:
    """A100 GPU 0 as seven 1g.10gb, GPU 1 as two 3g.40gb plus one 1g.10gb, GPU 2 whole."""
    out = [Device.mig(0, "1g.10gb", f"MIG-0-{i}", "A100") for i in range(7)]
    out += [Device.mig(1, "3g.40gb", f"MIG-1-{i}", "A100") for i in range(2)]
    out += [Device.mig(1, "1g.10gb", "MIG-1-2", "A100"), Device(GPU, 2, "A100", "GPU-2")]
    return out


def test_mig_instances_are_devices_of_their_own_kind() -> None:
    book = ledger(mig_node())
    assert book.aggregate_free(0) == Resources({MIG_1G: 8, MIG_3G: 2, GPU: 1, GPU_MILLI: WHOLE})
    assert slots_of(book, need({MIG_1G: 1})) == [8]
    assert slots_of(book, need({MIG_3G: 2})) == [1]
    assert slots_of(book, whole(2)) == [0]  # the partitioned GPUs are not offered whole
    placed = book.assign(0, need({MIG_3G: 1}))
    task = placed.tasks[0]
    assert task.indices == (1,) and task.uuids == ("MIG-1-0",)
    assert task.cuda_visible_devices == "MIG-1-0"  # MIG instances go by UUID
    # whole GPU and shares never touch MIG instances
    assert indices(book.assign(0, share(500))) == [(2,)]


def test_mig_instances_of_one_task_prefer_one_parent_gpu() -> None:
    book = ledger(mig_node())
    # parent 1 has one 1g.10gb left, parent 0 seven: a single instance packs parent 1
    assert book.assign(0, need({MIG_1G: 1})).tasks[0].uuids == ("MIG-1-2",)
    two = book.assign(0, need({MIG_1G: 2})).tasks[0]
    assert two.indices == (0, 0) and two.uuids == ("MIG-0-0", "MIG-0-1")


def test_a_gpu_cannot_be_offered_whole_and_partitioned() -> None:
    with pytest.raises(DeviceError, match="whole and as MIG"):
        ledger([Device(GPU, 0), Device.mig(0, "1g.10gb", "MIG-a")])
    with pytest.raises(DeviceError, match=r"two nvidia\.com/gpu devices with index 0"):
        ledger([Device(GPU, 0), Device(GPU, 0)])
    with pytest.raises(DeviceError, match="UUID"):
        ledger([Device.mig(0, "1g.10gb", "MIG-a"), Device.mig(0, "1g.10gb", "MIG-a")])


def test_vendor_accelerators_are_counted_under_their_own_name() -> None:
    mi300 = [Device(AMD, i, "MI300X") for i in range(4)]
    book = ledger(mi300, gpus(4))
    assert slots_of(book, need({AMD: 2})) == [2, 0]
    assert slots_of(book, whole(2)) == [0, 2]
    task = book.assign(0, need({AMD: 2})).tasks[0]
    assert task.kinds == (AMD, AMD) and task.indices == (0, 1)
    assert task.cuda_visible_devices == ""  # not a CUDA device
    mixed = book.assign(0, need({AMD: 1}, ["MI300X"]))
    assert indices(mixed) == [(2,)]


def test_a_task_of_several_kinds_gets_all_of_them() -> None:
    book = ledger([*gpus(2), Device(AMD, 0)], gpus(4))
    demand = need({GPU: 1, AMD: 1})
    assert slots_of(book, demand) == [1, 0]
    task = book.assign(0, demand).tasks[0]
    assert task.kinds == (GPU, AMD) and task.indices == (0, 0)


# ============================================================================ bookkeeping


def test_release_restores_and_refuses_what_was_not_assigned() -> None:
    book = ledger(gpus(2))
    placed = book.assign(0, whole(1)) + book.assign(0, share(300))
    assert len(placed) == 2
    book.release(placed)
    assert list(book.free_milli(0)) == [WHOLE, WHOLE]
    assert list(book.holders[0, :2]) == [0, 0]
    with pytest.raises(DeviceError):
        book.release(placed)  # twice
    assert list(book.free_milli(0)) == [WHOLE, WHOLE]  # a refused release changes nothing
    book.check()


def test_nodes_are_removed_only_when_idle_and_old_assignments_go_stale() -> None:
    book = ledger(gpus(2))
    placed = book.assign(0, whole(1))
    with pytest.raises(DeviceError, match="in use"):
        book.remove_node(0)
    book.release(placed)
    assert book.remove_node(0) == tuple(gpus(2))
    assert slots_of(book, whole(1)) == [0]
    book.add_node(0, gpus(2))
    with pytest.raises(DeviceError, match="changed"):
        book.release(placed)
    with pytest.raises(DeviceError, match="already has devices"):
        book.add_node(0, gpus(1))


def test_rows_may_be_added_sparsely_and_widen_the_ledger() -> None:
    book = DeviceLedger(width=1)
    book.add_node(5, gpus(16))
    assert book.size == 6 and book.width == 16
    assert slots_of(book, whole(1)) == [0, 0, 0, 0, 0, 16]
    book.check()


def test_copy_is_independent() -> None:
    book = ledger(gpus(2))
    other = book.copy()
    other.assign(0, whole(2))
    assert slots_of(book, whole(2)) == [1]
    assert slots_of(other, whole(2)) == [0]


# ============================================================================ property

DEMANDS = [
    whole(1),
    whole(2),
    whole(3, ["A100"]),
    whole(1, ["V100"]),
    share(100),
    share(250),
    share(500),
    share(600),
    need({GPU_MILLI: 999}, ["V100"]),
    need({MIG_1G: 1}),
    need({MIG_1G: 2}),
    need({MIG_3G: 1}),
    need({AMD: 1}),
    need({AMD: 2, GPU: 1}),
]


@st.composite
def node_devices(draw: st.DrawFn) -> list[Device]:
    count = draw(st.integers(0, 6))
    out = [
        Device(
            GPU,
            i,
            draw(st.sampled_from(["A100", "V100"])),
            link=draw(st.sampled_from(["", "x", "y"])),
        )
        for i in range(count)
    ]
    for parent in range(count, count + draw(st.integers(0, 2))):
        for k in range(draw(st.integers(1, 4))):
            profile = draw(st.sampled_from(["1g.10gb", "3g.40gb"]))
            out.append(Device.mig(parent, profile, f"MIG-{parent}-{k}", "A100"))
    out += [Device(AMD, i) for i in range(draw(st.integers(0, 2)))]
    return out


Op = tuple[str, int, int, int]  # ("assign", row, demand, count) or ("release", pick, 0, 0)

ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("assign"),
            st.integers(0, 3),
            st.integers(0, len(DEMANDS) - 1),
            st.integers(1, 4),
        ),
        st.tuples(st.just("release"), st.integers(0, 1000), st.just(0), st.just(0)),
    ),
    max_size=40,
)


def state(book: DeviceLedger) -> tuple[bytes, bytes, bytes]:
    return book.free.tobytes(), book.holders.tobytes(), book.exclusive.tobytes()


def check_against_assignments(
    book: DeviceLedger, nodes: list[list[Device]], live: list[tuple[DeviceDemand, DeviceAssignment]]
) -> None:
    """Recount every device's use from the live assignments: never over-committed, a whole
    device has no sharers, and the ledger and the aggregate columns agree with the recount."""
    held = np.zeros_like(book.free)
    sharers = np.zeros_like(book.free)
    wholes = np.zeros_like(book.free)
    used = [Resources() for _ in nodes]
    for demand, assignment in live:
        for task in assignment.tasks:
            used[task.row] = used[task.row] + demand.aggregate()
            for slot, milli in zip(task.slots, task.milli, strict=True):
                held[task.row, slot] += milli
                if milli == WHOLE:
                    wholes[task.row, slot] += 1
                else:
                    sharers[task.row, slot] += 1
    assert (held <= WHOLE).all(), "a device is over-committed"
    assert ((wholes == 0) | ((wholes == 1) & (sharers == 0))).all(), "a whole device is shared"
    assert (book.free + held == book.capacity).all()
    assert (book.holders == wholes + sharers).all()
    for row, devices in enumerate(nodes):
        assert book.aggregate_free(row) == aggregate_capacity(devices) - used[row]


@settings(max_examples=150, deadline=None)
@given(nodes=st.lists(node_devices(), min_size=1, max_size=4), script=ops)
def test_random_assign_and_release_never_over_commit(
    nodes: list[list[Device]], script: list[Op]
) -> None:
    book = DeviceLedger(width=3)
    for row, devices in enumerate(nodes):
        book.add_node(row, devices)
    empty = state(book)
    live: list[tuple[DeviceDemand, DeviceAssignment]] = []
    for kind, a, b, count in script:
        if kind == "assign":
            row, demand = a % len(nodes), DEMANDS[b]
            room = int(book.slots(np.array([row]), demand)[0])
            before = state(book)
            event("assign refused" if room < count else "assign fits")
            if room < count:  # slots is exact: assign refuses exactly when it says no room
                with pytest.raises(DevicesUnavailable):
                    book.assign(row, demand, count)
                assert state(book) == before
                continue
            first = book.assign(row, demand, count)
            assert len(first) == count
            book.release(first)
            assert state(book) == before  # release restores exactly
            again = book.assign(row, demand, count)
            assert again == first  # and assignment is deterministic
            live.append((demand, again))
        elif live:
            book.release(live.pop(a % len(live))[1])
        book.check()
        check_against_assignments(book, nodes, live)
    for _, assignment in reversed(live):
        book.release(assignment)
    assert state(book) == empty
