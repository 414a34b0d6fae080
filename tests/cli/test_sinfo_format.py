"""``fusesched sinfo``'s pure parts: node states by Slurm's names, ``-t``, the ``-o`` fields,
the lines that group nodes by partition and state (or one a node), the views' formats and the
JSON records."""

from __future__ import annotations

import time

import pytest

from fusesched.cli import sinfo_format as si
from fusesched.cli.squeue_format import FormatError

NOW = 1_700_000_000.0


def view(name: str, state: str = "up", pool: str | None = None, **fields: object) -> dict:
    """A node of ``GET /v1/nodes``: 4 CPUs, 8 GiB, nothing in use unless ``free`` says."""
    labels = {"fusesched.io/pool": pool} if pool else {}
    base: dict[str, object] = {
        "name": name,
        "state": state,
        "address": "10.0.0.1",
        "capacity": {"cpu": "4", "memory": "8Gi"},
        "free": {"cpu": "4", "memory": "8Gi"},
        "labels": labels,
        "devices": 0,
        "last_heartbeat_s_ago": 1.0,
        "drain_reason": None,
        "responding": True,
    }
    base.update(fields)
    return base


def info(name: str = "n1", state: str = "up", **fields: object) -> si.NodeInfo:
    return si.node_info(view(name, state, **fields))


def out(nodes: list[si.NodeInfo], fmt: str, node_oriented: bool = False) -> list[str]:
    return si.lines(nodes, si.parse(fmt), node_oriented=node_oriented, header=False)


@pytest.mark.parametrize(
    ("state", "fields", "compact", "long"),
    [
        ("up", {}, "idle", "idle"),
        ("up", {"free": {"cpu": "3", "memory": "8Gi"}}, "mix", "mixed"),
        ("up", {"free": {"cpu": "3500m", "memory": "8Gi"}}, "mix", "mixed"),
        ("up", {"free": {"cpu": "4", "memory": "6Gi"}}, "mix", "mixed"),
        ("up", {"free": {"cpu": "0", "memory": "6Gi"}}, "alloc", "allocated"),
        ("up", {"free": {"memory": "6Gi"}}, "alloc", "allocated"),  # (all in use: left out)
        ("draining", {"free": {"cpu": "2", "memory": "8Gi"}}, "drng", "draining"),
        ("drained", {"drain_reason": "disk"}, "drain", "drained"),
        ("down", {"responding": False}, "down*", "down*"),
        ("down", {}, "down", "down"),
        ("down", {"drain_reason": "disk", "responding": False}, "drain*", "drained*"),
        ("suspended", {}, "idle~", "idle~"),
        ("up", {"responding": False}, "idle*", "idle*"),
        # (all that is booked is ended jobs' whose tasks are being killed: Slurm's COMPLETING)
        ("up", {"free": {"cpu": "2", "memory": "8Gi"}, "completing": True}, "comp", "completing"),
        ("up", {"free": {"memory": "8Gi"}, "completing": True}, "comp", "completing"),
        ("draining", {"free": {"cpu": "2"}, "completing": True}, "drng", "draining"),
        ("down", {"completing": True}, "down", "down"),
    ],
)
def test_states_are_slurms(state: str, fields: dict, compact: str, long: str) -> None:
    node = info(state=state, **fields)
    assert si.compact_state(node) == compact
    assert si.long_state(node) == long


def test_state_names_for_t_match_the_state_as_shown() -> None:
    idle, drained = info("n1"), info("n2", "drained", drain_reason="disk")
    busy = info("n3", free={"cpu": "1", "memory": "8Gi"})
    draining = info("n4", "draining", free={"cpu": "1", "memory": "8Gi"})
    down, asleep = info("n5", "down", responding=False), info("n6", "suspended")
    completing = info("n7", free={"cpu": "2", "memory": "8Gi"}, completing=True)
    every = [idle, drained, busy, draining, down, asleep, completing]

    def match(*given: str) -> list[str]:
        test = si.parse_states(given)
        return [n.name for n in every if test(n)]

    assert match("idle") == ["n1", "n6"]  # (a drained node is drain, not idle)
    assert match("DRAIN") == ["n2", "n4"]
    assert match("drained") == ["n2"]
    assert match("drng", "down") == ["n4", "n5"]
    assert match("mix,alloc") == ["n3"]
    assert match("powered_down") == ["n6"]
    assert match("no_respond") == ["n5"]
    assert match("idle,comp") == ["n1", "n6", "n7"]
    assert match("COMPLETING") == ["n7"]
    assert match("idle,maint") == ["n1", "n6"]  # (a state fusesched never has matches none)
    assert match("all") == [n.name for n in every]


@pytest.mark.parametrize("given", ["sleepy", "idle,,down", ""])
def test_unknown_states_are_refused_with_the_known_ones(given: str) -> None:
    with pytest.raises(ValueError, match="known: idle, mix"):
        si.parse_states([given])


def test_default_view_is_a_line_per_partition_and_state_default_first() -> None:
    nodes = [
        info("gpu2", pool="gpu"),
        info("n10"),
        info("n2"),
        info("n3", "drained", drain_reason="disk"),
        info("n1"),
        info("gpu1", pool="gpu", free={"cpu": "0", "memory": "0"}),
    ]
    text = si.default_format(nodes, node_oriented=False, long=False, summarize=False, reasons=False)
    lines = si.lines(nodes, si.parse(text), node_oriented=False, header=True)
    assert lines == [
        "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST",
        "local*       up   infinite      3   idle n[1-2,10]",  # (as Slurm writes it)
        "local*       up   infinite      1  drain n3",
        "gpu          up   infinite      1  alloc gpu1",
        "gpu          up   infinite      1   idle gpu2",
    ]


def test_node_oriented_view_has_a_line_a_node_as_wide_as_the_names() -> None:
    """As Slurm 22.05's sinfo -N: the names as wide as the widest (at least 9), the
    partitions so too and right-justified."""
    nodes = [info("gpu-node-10", pool="gpu"), info("n1", "down", responding=False)]
    text = si.default_format(nodes, node_oriented=True, long=False, summarize=False, reasons=False)
    assert si.lines(nodes, si.parse(text), node_oriented=True, header=True) == [
        "NODELIST     NODES PARTITION STATE ",  # (%6t: the last column padded too)
        "gpu-node-10      1       gpu idle  ",
        "n1               1    local* down* ",
    ]
    short = [info("vm")]  # (the real sinfo -N of a node vm in partition debug*, its layout)
    text = si.default_format(short, node_oriented=True, long=False, summarize=False, reasons=False)
    assert si.lines(short, si.parse(text), node_oriented=True, header=True) == [
        "NODELIST   NODES PARTITION STATE ",
        "vm             1    local* idle  ",
    ]


def test_summarize_counts_nodes_allocated_idle_other_total() -> None:
    nodes = [
        info("n1"),
        info("n2", free={"cpu": "2", "memory": "8Gi"}),
        info("n3", "draining", free={"cpu": "2", "memory": "8Gi"}),
        info("n4", "down"),
        info("n5", "suspended"),
    ]
    text = si.default_format(nodes, node_oriented=False, long=False, summarize=True, reasons=False)
    assert si.lines(nodes, si.parse(text), node_oriented=False, header=True) == [
        "PARTITION AVAIL  TIMELIMIT   NODES(A/I/O/T) NODELIST",  # (one blank, as sinfo's)
        "local*       up   infinite          1/2/2/5 n[1-5]",
    ]
    # CPUs: 2 in use on n2 and on n3; n3's other 2 and n4's 4 are out of use
    assert out(nodes, "%C") == ["4/10/6/20"]
    assert out(nodes, "%A") == ["1/2"]
    completing = [*nodes, info("n6", free={"cpu": "2", "memory": "8Gi"}, completing=True)]
    assert out(completing, "%A") == ["2/2"]  # (booked: allocated, as Slurm counts it)


def test_reasons_show_who_drained_and_when() -> None:
    at = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(NOW))
    drained = info("n1", "drained", drain_reason="disk swap", drained_by="root", drained_at=NOW)
    anonymous = info("n2", "drained", drain_reason="disk swap")
    lost = info("n3", "down", reason="no heartbeat", since=NOW, responding=False)
    idle = info("n4", reason="came back", since=NOW)
    listed = [n for n in (drained, anonymous, lost, idle) if si.reasons_only(n)]
    text = si.default_format(listed, node_oriented=False, long=False, summarize=False, reasons=True)
    assert si.lines(listed, si.parse(text), node_oriented=False, header=True) == [
        "REASON               USER      TIMESTAMP           NODELIST",
        f"disk swap            root      {at} n1",
        "disk swap            Unknown   Unknown             n2",
        f"no heartbeat         fusesched {at} n3",
    ]
    assert idle.reason == "none"  # (an up node's last change is no reason)


def test_fields_and_widths() -> None:
    gpu = info(
        "g1",
        pool="gpu",
        capacity={"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "2", "ephemeral-storage": "1Gi"},
        free={"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "1"},
        labels={
            "fusesched.io/pool": "gpu",
            "fusesched.io/gpu-model": "H200",
            "feature.fusesched.io/ib": "",
            "feature.fusesched.io/nvme": "",
            "kubernetes.io/hostname": "g1.example",
        },
    )
    assert out([gpu], "%c|%m|%d|%G|%f|%O|%z|%R|%P|%T|%n|%o") == [
        "8|16384|1024|gpu:H200:2|ib,nvme|N/A|8:1:1|gpu|gpu|mixed|g1.example|10.0.0.1"
    ]
    assert out([info()], "%G %f") == ["(null) (null)"]
    assert out([info()], "[%.8t] [%-8t] [%3P]") == ["[    idle] [idle    ] [loc]"]
    assert out([info()], "100%% %t") == ["100% idle"]


def test_a_line_splits_where_a_shown_value_differs() -> None:
    small = [info("n1"), info("n2"), info("n3", capacity={"cpu": "8", "memory": "8Gi"})]
    assert out(small, "%D %c %N") == ["2 4 n[1-2]", "1 8 n3"]
    assert out(small, "%D %N") == ["3 n[1-3]"]


@pytest.mark.parametrize(
    ("fmt", "says"),
    [
        ("%P %q", "unknown format field %q"),
        ("%P %", "ends inside a field"),
        ("", "an empty --format"),
        ("%5000P", "too wide"),
    ],
)
def test_bad_formats_are_refused(fmt: str, says: str) -> None:
    with pytest.raises(FormatError, match=says):
        si.parse(fmt)


def test_control_characters_in_a_reason_print_as_question_marks() -> None:
    node = info("n1", "drained", drain_reason="bad\x1b[31m\nfan")
    assert out([node], "%E") == ["bad?[31m?fan"]


def test_json_record() -> None:
    node = info("n1", "drained", drain_reason="disk", drained_by="root", drained_at=NOW)
    assert si.record(node) == {
        "name": "n1",
        "partition": "local",
        "default_partition": True,
        "avail": "up",
        "timelimit": "infinite",
        "state": "drain",
        "state_long": "drained",
        "cpus": 4,
        "cpus_allocated": 0,
        "memory_mb": 8192,
        "tmp_disk_mb": 0,
        "gres": "(null)",
        "features": [],
        "reason": "disk",
        "reason_user": "root",
        "reason_time": NOW,
        "responding": True,
        "address": "10.0.0.1",
    }


def test_an_unreadable_quantity_counts_as_none() -> None:
    node = info(capacity={"cpu": "four", "memory": "8Gi"})
    assert (node.cpus, node.memory_mb) == (0, 8192)


# ---------------------------------------------------------------------- the -l views


def _view(nodes: list[si.NodeInfo], **options: bool) -> list[str]:
    flags = {"node_oriented": False, "long": True, "summarize": False, "reasons": False}
    flags.update(options)
    text = si.default_format(nodes, **flags)
    return si.lines(nodes, si.parse(text), node_oriented=flags["node_oriented"], header=True)


def test_long_view_has_slurm_22_05s_columns() -> None:
    """sinfo -l of Slurm 22.05 (the real one's header): the partition's settings, which a
    pool has none of, as Slurm's defaults; long state names."""
    nodes = [info("n1"), info("n2", free={"cpu": "2", "memory": "8Gi"}), info("g1", pool="gpu")]
    assert _view(nodes) == [
        "PARTITION AVAIL  TIMELIMIT   JOB_SIZE ROOT OVERSUBS     GROUPS"
        "  NODES       STATE NODELIST",
        "local*       up   infinite 1-infinite   no       NO        all      1        idle n1",
        "local*       up   infinite 1-infinite   no       NO        all      1       mixed n2",
        "gpu          up   infinite 1-infinite   no       NO        all      1        idle g1",
    ]
    wide = [info("n1", pool="verylongpartitionname")]  # (as wide as the widest, left)
    assert _view(wide)[1].startswith("verylongpartitionname    up ")


def test_node_oriented_long_view_has_slurm_22_05s_columns() -> None:
    """sinfo -N -l of Slurm 22.05 (the real one's layout, byte for byte): CPUS
    left-justified, S:C:T, WEIGHT, AVAIL_FEATURES cut to 8, REASON padded to its 20."""
    size = {"cpu": "2", "memory": "22057Mi"}
    nodes = [info("vm", capacity=size, free=size)]
    assert _view(nodes, node_oriented=True) == [
        "NODELIST   NODES PARTITION       STATE CPUS    S:C:T MEMORY TMP_DISK WEIGHT AVAIL_FE"
        " REASON              ",
        "vm             1    local*        idle 2       2:1:1  22057        0      1   (null)"
        " none                ",
    ]


def test_long_reasons_show_who_with_their_uid() -> None:
    import pwd

    root = pwd.getpwuid(0).pw_name
    at = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(NOW))
    nodes = [
        info("n1", "drained", drain_reason="disk", drained_by=root, drained_at=NOW),
        info("n2", "drained", drain_reason="fans", drained_by="no-such-user-here"),
        info("n3", "drained", drain_reason="psu"),
    ]
    assert _view(nodes, reasons=True) == [
        "REASON               USER         TIMESTAMP           STATE  NODELIST",
        f"disk                 {root}(0)      {at} drain  n1",
        "fans                 no-such-user Unknown             drain  n2",
        "psu                  Unknown      Unknown             drain  n3",
    ]
    assert out(nodes[:1], "%U|%u") == [f"{root}(0)|{root}"]
