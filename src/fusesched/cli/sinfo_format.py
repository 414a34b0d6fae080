"""What ``fusesched sinfo`` prints: the nodes of ``GET /v1/nodes`` as Slurm's sinfo shows
them — node states by Slurm's names, ``-t`` state names, and the ``-o`` fields (``%P %t %N``…)
with the lines they make.

A *partition* here is a pool (the ``fusesched.io/pool`` label: ``local`` for the local
agents' nodes, or a Slurm or Kubernetes pool): fusesched's node set, the closest to Slurm's
partition. The ``local`` pool, where jobs run when no federation routes them elsewhere, is the
default partition, marked ``*`` as Slurm marks its default.

As sinfo does, a listing is a line per group of nodes that share every value the format
shows except the counting fields (``%D %N %n %o %C %F %A``), which add the group up;
node-oriented (``-N``), a line per node.

Pure functions of the node views and the format text; bad input raises
:class:`~fusesched.cli.squeue_format.FormatError` (or ``ValueError`` for a state) with a
message that says what is known.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from fusesched.cli.squeue_format import Field, FormatError, Piece, parse_format, render
from fusesched.hostlist import compress_hostlist
from fusesched.model.node import LABEL_POOL, LOCAL_POOL
from fusesched.model.resources import CPU, GPU, MEMORY, QuantityError, parse_quantity
from fusesched.submit.sbatch import FEATURE_LABEL_PREFIX

#: The default partition (marked ``*``): the local agents' pool.
DEFAULT_PARTITION: Final = LOCAL_POOL
DISK: Final = "ephemeral-storage"
#: Labels naming a GPU's model (``gpu:H200:2``).
GPU_MODEL_LABEL: Final = "fusesched.io/gpu-model"
#: Who set a reason fusesched's controller set itself (Slurm says ``slurm``).
CONTROLLER_USER: Final = "fusesched"
MIB: Final = 2**20


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One node as sinfo sees it. ``base``: ``idle``, ``mixed``, ``allocated``,
    ``completing`` (all it has booked is ended jobs' whose tasks are being killed) or ``down``;
    ``drain``: ``draining`` (jobs still run), ``drained`` or None; ``powered_down``: suspended
    by power saving (``~``); ``responding``: its heartbeats arrive (else ``*``)."""

    name: str
    partition: str
    default: bool
    base: str
    drain: str | None
    powered_down: bool
    responding: bool
    cpus: int
    cpus_alloc: int
    memory_mb: int
    tmp_disk_mb: int
    gres: str
    features: tuple[str, ...]
    reason: str
    reason_user: str
    reason_time: float | None
    address: str
    hostname: str
    # what its agent last said: free memory (the kernel's MemFree, MiB) and the 5-minute load
    # average (Slurm's CPULoad); None: not known (an agent older than them says neither)
    free_mem_mb: int | None = None
    cpu_load: float | None = None

    @property
    def other(self) -> bool:
        """Out of use (drained, draining or down): sinfo's *other* in ``A/I/O/T``."""
        return self.drain is not None or self.base == "down"


def node_info(view: Mapping[str, Any]) -> NodeInfo:
    """A node view of ``GET /v1/nodes`` as sinfo sees it."""
    capacity, free = _amounts(view.get("capacity") or {}), _amounts(view.get("free") or {})
    # (what is all in use is left out of ``free``, as ``fusesched nodes`` reads it)
    used = {name: max(0, amount - free.get(name, 0)) for name, amount in capacity.items()}
    labels = view.get("labels") or {}
    partition = str(labels.get(LABEL_POOL) or LOCAL_POOL)
    state = str(view.get("state") or "")
    drain_reason = view.get("drain_reason")
    drain = None
    if state == "draining":
        drain = "draining"
    elif state == "drained" or drain_reason is not None:
        drain = "drained"
    cpus = math.ceil(capacity.get(CPU, 0) / 1000)
    cpus_alloc = min(cpus, math.ceil(used.get(CPU, 0) / 1000))
    if state == "down":
        base = "down"
    elif view.get("completing"):  # (the controller says: Slurm's COMPLETING)
        base = "completing"
    elif cpus and cpus_alloc >= cpus:
        base = "allocated"
    elif any(used.values()):
        base = "mixed"
    else:
        base = "idle"
    if drain_reason is not None:
        reason, by, at = str(drain_reason), view.get("drained_by"), view.get("drained_at")
    elif view.get("reason") and (drain is not None or state in ("down", "suspended")):
        reason, by, at = str(view["reason"]), CONTROLLER_USER, view.get("since")
    else:
        reason, by, at = "none", None, None
    features = sorted(
        key.removeprefix(FEATURE_LABEL_PREFIX)
        for key in labels
        if key.startswith(FEATURE_LABEL_PREFIX)
    )
    return NodeInfo(
        name=str(view["name"]),
        partition=partition,
        default=partition == DEFAULT_PARTITION,
        base=base,
        drain=drain,
        powered_down=state == "suspended",
        responding=bool(view.get("responding", True)),
        cpus=cpus,
        cpus_alloc=cpus_alloc,
        memory_mb=capacity.get(MEMORY, 0) // MIB,
        tmp_disk_mb=capacity.get(DISK, 0) // MIB,
        gres=_gres(capacity, labels),
        features=tuple(features),
        reason=reason,
        reason_user=str(by) if by else "Unknown",
        reason_time=float(at) if at is not None else None,
        address=str(view.get("address") or ""),
        hostname=str(labels.get("kubernetes.io/hostname") or view["name"]),
        free_mem_mb=_reading(view.get("free_memory_bytes"), MIB),
        cpu_load=_load(view.get("load5")),
    )


def _reading(value: Any, unit: int) -> int | None:
    """A whole count of ``unit`` (rounded down, as Slurm's); None when not a count."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        return None
    return int(value // unit) if math.isfinite(value) else None


def _load(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def free_mem_text(node: NodeInfo) -> str:
    """``%e`` (scontrol's ``FreeMem``): free MiB, ``N/A`` when not known."""
    return "N/A" if node.free_mem_mb is None else str(node.free_mem_mb)


def cpu_load_text(node: NodeInfo) -> str:
    """``%O`` (scontrol's ``CPULoad``): the load average with two decimals, ``N/A`` when not
    known."""
    return "N/A" if node.cpu_load is None else f"{node.cpu_load:.2f}"


def _amounts(quantities: Mapping[str, Any]) -> dict[str, int]:
    """Quantities (``"2"``, ``"1500m"``, ``"2Gi"``) in base units; one that cannot be read is
    left out (its value shows as none)."""
    out: dict[str, int] = {}
    for name, text in quantities.items():
        try:
            out[name] = parse_quantity(name, text)
        except (QuantityError, ValueError):
            continue
    return out


def _gres(capacity: Mapping[str, int], labels: Mapping[str, str]) -> str:
    """Slurm's GRES of a node: ``gpu:H200:2`` (the model when the node says it), other
    accelerators by their names (``nvidia.com/mig-1g.10gb:7``); ``(null)`` for none."""
    said = []
    for name in sorted(capacity, key=lambda n: (n != GPU, n)):
        count = capacity[name]
        if name in (CPU, MEMORY, DISK) or count <= 0:
            continue
        if name == GPU:
            model = labels.get(GPU_MODEL_LABEL)
            said.append(f"gpu:{model}:{count}" if model else f"gpu:{count}")
        else:
            said.append(f"{name}:{count}")
    return ",".join(said) or "(null)"


# ---------------------------------------------------------------------- states

#: Compact state names (``%t``) by long name (``%T``).
COMPACT: Final = {
    "idle": "idle",
    "mixed": "mix",
    "allocated": "alloc",
    "completing": "comp",
    "down": "down",
    "draining": "drng",
    "drained": "drain",
}


def long_state(node: NodeInfo) -> str:
    """``%T``: ``idle``, ``mixed``, ``allocated``, ``completing``, ``draining``, ``drained``,
    ``down``, with
    ``~`` when powered down by power saving and ``*`` when the node does not answer."""
    return (node.drain or node.base) + _suffix(node)


def compact_state(node: NodeInfo) -> str:
    """``%t``: ``idle``, ``mix``, ``alloc``, ``comp``, ``drng``, ``drain``, ``down`` (and
    ``~``, ``*``)."""
    return COMPACT[node.drain or node.base] + _suffix(node)


def _suffix(node: NodeInfo) -> str:
    return ("~" if node.powered_down else "") + ("" if node.responding else "*")


NodeTest = Callable[[NodeInfo], bool]

#: ``-t`` state names (any case), each with the nodes it matches: as the state is shown (a
#: drained node is ``drain``, not ``idle``).
STATE_TESTS: Final[dict[str, NodeTest]] = {
    "IDLE": lambda n: n.drain is None and n.base == "idle",
    "MIX": lambda n: n.drain is None and n.base == "mixed",
    "MIXED": lambda n: n.drain is None and n.base == "mixed",
    "ALLOC": lambda n: n.drain is None and n.base == "allocated",
    "ALLOCATED": lambda n: n.drain is None and n.base == "allocated",
    "COMP": lambda n: n.drain is None and n.base == "completing",
    "COMPLETING": lambda n: n.drain is None and n.base == "completing",
    "DRAIN": lambda n: n.drain is not None,
    "DRAINED": lambda n: n.drain == "drained",
    "DRAINING": lambda n: n.drain == "draining",
    "DRNG": lambda n: n.drain == "draining",
    "DOWN": lambda n: n.drain is None and n.base == "down",
    "POWERED_DOWN": lambda n: n.powered_down,
    "POWER_DOWN": lambda n: n.powered_down,
    "NO_RESPOND": lambda n: not n.responding,
    "ALL": lambda n: True,
}
#: Slurm node states a fusesched node is never in: asked for, they match none (so a script's
#: ``-t idle,comp`` works).
NEVER_STATES: Final = frozenset(
    {
        "BLOCKED",
        "BOOT",
        "CLOUD",
        "FAIL",
        "FAILING",
        "FUTR",
        "FUTURE",
        "INVAL",
        "MAINT",
        "NPC",
        "PERFCTRS",
        "PLANNED",
        "PLND",
        "POWERING_DOWN",
        "POWERING_UP",
        "REBOOT",
        "RESERVED",
        "RESV",
        "UNK",
        "UNKNOWN",
    }
)


def parse_states(given: Iterable[str]) -> NodeTest:
    """``-t idle,drain`` (each item may hold a comma list; case does not matter) as a test of
    a node; a ``ValueError`` listing the known names for any other."""
    tests: list[NodeTest] = []
    for item in given:
        for raw in item.split(","):
            word = raw.strip().upper()
            if word in STATE_TESTS:
                tests.append(STATE_TESTS[word])
            elif word not in NEVER_STATES:
                known = ", ".join(name.lower() for name in STATE_TESTS)
                what = f"unknown node state {raw.strip()!r}" if word else "an empty node state"
                raise ValueError(f"{what} in {item!r}; known: {known}")
    return lambda node: any(test(node) for test in tests)


# ---------------------------------------------------------------------- fields

Row = dict[str, Any]  # {"nodes": [NodeInfo, …]}: one line's nodes


def _first(value: Callable[[NodeInfo], str]) -> Callable[[Row], str]:
    """A field whose value every node of a line shares (the grouping makes it so)."""
    return lambda row: value(row["nodes"][0])


def _stamp(t: float | None) -> str:
    return "Unknown" if t is None else time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


def timestamp(t: float | None = None) -> str:
    """The time line sinfo prints above ``-l`` and each ``-i`` listing: ``Mon Dec 07
    19:10:00 2026`` (local time, the day of the month with its zero)."""
    return time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(t))


def _partition(node: NodeInfo) -> str:
    return node.partition + ("*" if node.default else "")


def user_long(node: NodeInfo) -> str:
    """``%U``: who set the reason with their uid, ``root(0)``, as Slurm's; a user this
    machine does not know (a token's user) by name alone, ``Unknown`` when not known."""
    import pwd

    if node.reason_user == "Unknown":
        return node.reason_user
    try:
        return f"{node.reason_user}({pwd.getpwnam(node.reason_user).pw_uid})"
    except KeyError:
        return node.reason_user


def _cpu_counts(row: Row) -> str:
    """``%C``: CPUs allocated/idle/other/total (other: on drained and down nodes)."""
    nodes: list[NodeInfo] = row["nodes"]
    alloc = sum(n.cpus_alloc for n in nodes)
    other = sum(n.cpus - n.cpus_alloc for n in nodes if n.other)
    total = sum(n.cpus for n in nodes)
    return f"{alloc}/{total - alloc - other}/{other}/{total}"


def _node_counts(row: Row, with_other: bool = True) -> str:
    """``%F``: nodes allocated/idle/other/total; ``%A``: allocated/idle."""
    nodes: list[NodeInfo] = row["nodes"]
    other = sum(1 for n in nodes if n.other)
    alloc = sum(1 for n in nodes if not n.other and n.base in ("mixed", "allocated", "completing"))
    idle = len(nodes) - other - alloc
    return f"{alloc}/{idle}/{other}/{len(nodes)}" if with_other else f"{alloc}/{idle}"


def _hostlist(row: Row, value: Callable[[NodeInfo], str]) -> str:
    """A line's names (or addresses) as a host list, each once (nodes may share an address)."""
    return compress_hostlist(list(dict.fromkeys(value(n) for n in row["nodes"])))


#: ``-o`` fields by letter, with sinfo's headers. The counting ones add up a line's nodes.
FIELDS: Final[dict[str, Field]] = {
    "P": Field("PARTITION", _first(_partition)),
    "R": Field("PARTITION", _first(lambda n: n.partition)),
    "a": Field("AVAIL", lambda _row: "up"),
    "l": Field("TIMELIMIT", lambda _row: "infinite"),
    "t": Field("STATE", _first(compact_state)),
    "T": Field("STATE", _first(long_state)),
    "D": Field("NODES", lambda row: str(len(row["nodes"]))),
    "N": Field("NODELIST", lambda row: _hostlist(row, lambda n: n.name)),
    "n": Field("HOSTNAMES", lambda row: _hostlist(row, lambda n: n.hostname)),
    "o": Field("NODE_ADDR", lambda row: _hostlist(row, lambda n: n.address)),
    "c": Field("CPUS", _first(lambda n: str(n.cpus))),
    "C": Field("CPUS(A/I/O/T)", _cpu_counts),
    "F": Field("NODES(A/I/O/T)", _node_counts),
    "A": Field("NODES(A/I)", lambda row: _node_counts(row, with_other=False)),
    "m": Field("MEMORY", _first(lambda n: str(n.memory_mb))),
    "d": Field("TMP_DISK", _first(lambda n: str(n.tmp_disk_mb))),
    "G": Field("GRES", _first(lambda n: n.gres)),
    "f": Field("AVAIL_FEATURES", _first(lambda n: ",".join(n.features) or "(null)")),
    "b": Field("ACTIVE_FEATURES", _first(lambda n: ",".join(n.features) or "(null)")),
    "E": Field("REASON", _first(lambda n: n.reason)),
    "u": Field("USER", _first(lambda n: n.reason_user)),
    "U": Field("USER", _first(user_long)),
    "H": Field("TIMESTAMP", _first(lambda n: _stamp(n.reason_time))),
    # what the node's agent last said (N/A: not known); nodes whose figures differ go on
    # lines of their own, as in Slurm
    "e": Field("FREE_MEM", _first(free_mem_text)),
    "O": Field("CPU_LOAD", _first(cpu_load_text)),
    # a node's CPUs as Slurm counts those of a node configured by CPU count alone: each CPU
    # a socket of one core of one thread
    "z": Field("S:C:T", _first(lambda n: f"{n.cpus}:1:1")),
    "X": Field("SOCKETS", _first(lambda n: str(n.cpus))),
    "Y": Field("CORES", lambda _row: "1"),
    "Z": Field("THREADS", lambda _row: "1"),
    # partition settings fusesched's pools do not have: Slurm's defaults
    "s": Field("JOB_SIZE", lambda _row: "1-infinite"),
    "w": Field("WEIGHT", lambda _row: "1"),
    "h": Field("OVERSUBSCRIBE", lambda _row: "NO"),
    "g": Field("GROUPS", lambda _row: "all"),
    "r": Field("ROOT", lambda _row: "no"),
    "B": Field("MAX_CPUS_PER_NODE", lambda _row: "UNLIMITED"),
}
#: The fields that add up a line's nodes instead of splitting lines by their value.
COUNTING: Final = frozenset(FIELDS[k] for k in "DNnoCFA")

#: The formats of sinfo's views, as Slurm 22.05's sinfo prints them (checked against it: its
#: man page's -s has two blanks before %N and its -N -l %.4c, where its sinfo prints one and
#: the CPUs left-justified). ``#``: as wide as the widest value, at least 9 (sinfo's
#: MIN_NODE_FIELD_SIZE and MIN_PART_FIELD_SIZE); ``%.#P``: so, right-justified, as sinfo
#: prints the partitions of its node-oriented views.
PARTITION_FORMAT: Final = "%#P %.5a %.10l %.6D %.6t %N"
NODE_FORMAT: Final = "%#N %.6D %.#P %6t"
#: -l: the partition's settings (``JOB_SIZE ROOT OVERSUBS GROUPS``: Slurm's defaults, as
#: fusesched's pools have none of them) where the short view has none, long state names.
LONG_FORMAT: Final = "%#P %.5a %.10l %.10s %.4r %.8h %.10g %.6D %.11T %N"
NODE_LONG_FORMAT: Final = "%#N %.6D %.#P %.11T %4c %.8z %.6m %.8d %.6w %.8f %20E"
SUMMARIZE_FORMAT: Final = "%#P %.5a %.10l %.16F %N"
REASONS_FORMAT: Final = "%20E %9u %19H %N"
REASONS_LONG_FORMAT: Final = "%20E %12U %19H %6t %N"
#: The least width of ``#`` fields (sinfo's).
MIN_FIELD: Final = 9


def default_format(
    nodes: Sequence[NodeInfo], *, node_oriented: bool, long: bool, summarize: bool, reasons: bool
) -> str:
    """The format sinfo uses for these options (``-s`` before ``-N`` before ``-R``, each
    with ``-l`` its long one, as Slurm 22.05's: ``sinfo -R -N`` is ``-N``'s lines of the
    nodes with a reason), its ``%#`` widths set to the widest name of ``nodes`` (at least
    :data:`MIN_FIELD`). Node-oriented, a line's node list is its node's name; else a line's
    list is at the end, with no width."""
    if summarize:
        text = SUMMARIZE_FORMAT
    elif node_oriented:
        text = NODE_LONG_FORMAT if long else NODE_FORMAT
    elif reasons:
        text = REASONS_LONG_FORMAT if long else REASONS_FORMAT
    else:
        text = LONG_FORMAT if long else PARTITION_FORMAT
    widest_name = max((len(n.name) for n in nodes), default=0)
    widest_part = max((len(_partition(n)) for n in nodes), default=0)
    text = text.replace("%#N", f"%{max(widest_name, MIN_FIELD)}N")
    text = text.replace("%.#P", f"%.{max(widest_part, MIN_FIELD)}P")
    return text.replace("%#P", f"%{max(widest_part, MIN_FIELD)}P")


def parse(text: str) -> list[Piece]:
    """sinfo's ``-o`` text (``%[.|-][WIDTH]LETTER``, ``.``: right-justified) as pieces; a
    :class:`FormatError` naming the known letters for any other."""
    if not text:
        raise FormatError("an empty --format shows nothing: give fields, such as '%P %t %N'")
    return parse_format(text, FIELDS)


# ---------------------------------------------------------------------- lines

_NUMBER: Final = re.compile(r"(\d+)")


def _natural(name: str) -> tuple[Any, ...]:
    """``n2`` before ``n10``."""
    return tuple(int(p) if p.isdigit() else p for p in _NUMBER.split(name))


def rows(nodes: Iterable[NodeInfo], pieces: Sequence[Piece], node_oriented: bool) -> list[Row]:
    """The lines of a listing, each with its nodes: the default partition first, then the
    others by name; in each, nodes that share every non-counting value of ``pieces`` make
    one line (node-oriented: each node its own line, by name)."""
    shown = [p.field for p in pieces if p.field is not None and p.field not in COUNTING]
    if node_oriented:
        ordered = sorted(nodes, key=lambda n: _natural(n.name))
    else:
        ordered = sorted(nodes, key=lambda n: (not n.default, n.partition, _natural(n.name)))
    grouped: dict[tuple[str, ...], Row] = {}
    for node in ordered:
        one: Row = {"nodes": [node]}
        key = tuple(field.value(one) for field in shown)
        if node_oriented:
            key = (node.name, *key)
        grouped.setdefault(key, {"nodes": []})["nodes"].append(node)
    return list(grouped.values())


def lines(
    nodes: Iterable[NodeInfo], pieces: Sequence[Piece], *, node_oriented: bool, header: bool
) -> list[str]:
    """What sinfo prints for ``nodes`` in the format ``pieces``."""
    return render(pieces, rows(nodes, pieces, node_oriented), header=header)


def reasons_only(node: NodeInfo) -> bool:
    """Whether ``-R`` lists the node: drained, draining or down."""
    return node.other


def record(node: NodeInfo) -> dict[str, Any]:
    """A node for ``--json``."""
    return {
        "name": node.name,
        "partition": node.partition,
        "default_partition": node.default,
        "avail": "up",
        "timelimit": "infinite",
        "state": compact_state(node),
        "state_long": long_state(node),
        "cpus": node.cpus,
        "cpus_allocated": node.cpus_alloc,
        "memory_mb": node.memory_mb,
        "tmp_disk_mb": node.tmp_disk_mb,
        "gres": node.gres,
        "features": list(node.features),
        "reason": node.reason,
        "reason_user": node.reason_user,
        "reason_time": node.reason_time,
        "responding": node.responding,
        "address": node.address,
    }
