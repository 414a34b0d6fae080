"""Resources as named integer quantities, with Kubernetes-style parsing.

Every quantity is stored as an integer in the resource's base unit:

* ``cpu`` in milli-cores (``"2"`` → 2000, ``"500m"`` → 500),
* ``memory`` and ``ephemeral-storage`` in bytes (``"64Gi"`` → 68719476736),
* every other resource (``nvidia.com/gpu``, MIG profiles such as ``nvidia.com/mig-1g.10gb``,
  ``fusesched.io/gpu-milli`` shares, ``fpga``, ``rdma``, any vendor name) as a plain count.

``Resources`` is an immutable mapping with the arithmetic a scheduler needs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from decimal import Decimal, DecimalException
from typing import Final

CPU: Final = "cpu"
MEMORY: Final = "memory"
GPU: Final = "nvidia.com/gpu"
GPU_MILLI: Final = "fusesched.io/gpu-milli"
FPGA: Final = "fpga"
RDMA: Final = "rdma"

#: Short names accepted on input and mapped to their canonical resource name.
ALIASES: Final[Mapping[str, str]] = {
    "cpus": CPU,
    "mem": MEMORY,
    "gpu": GPU,
    "gpus": GPU,
    "nvidia.com/gpus": GPU,
    "gpu-milli": GPU_MILLI,
}

_CORE_NAMES: Final = frozenset({CPU, MEMORY, "ephemeral-storage"})  # matched case-insensitively
_MILLI_UNIT: Final = frozenset({CPU})
_BYTE_UNIT: Final = frozenset({MEMORY, "ephemeral-storage"})

_SUFFIX: Final[Mapping[str, Decimal]] = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
# A number with either a decimal exponent or a unit suffix (not both, as in Kubernetes).
_QUANTITY_RE: Final = re.compile(
    r"^\s*(?P<num>[+]?(\d+(\.\d*)?|\.\d+))"
    r"(?:(?P<exp>[eE][+-]?\d+)|(?P<suffix>[KMGTPE]i|[mkMGTPE]))?\s*$"
)
#: The largest quantity in a base unit: what the core's 64-bit arrays hold, with room to spare
#: (4 EiB of memory, 4.6·10^15 cores).
MAX_QUANTITY: Final = 2**62
_NAME_RE: Final = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


class QuantityError(ValueError):
    """A resource name or quantity that cannot be understood."""


def canonical_name(name: str) -> str:
    """Return the canonical resource name for ``name`` (aliases resolved, validated)."""
    stripped = name.strip()
    lowered = stripped.lower()
    key = ALIASES.get(lowered, lowered if lowered in _CORE_NAMES else stripped)
    if not _NAME_RE.fullmatch(key):
        raise QuantityError(f"invalid resource name {name!r}")
    return key


def base_unit_scale(name: str) -> int:
    """How many base units make one written unit of ``name`` (1000 for cpu, else 1)."""
    return 1000 if name in _MILLI_UNIT else 1


def parse_quantity(name: str, value: str | int | float) -> int:
    """Parse a Kubernetes-style quantity for resource ``name`` into its base unit.

    >>> parse_quantity("cpu", "500m"), parse_quantity("memory", "1Ki"), parse_quantity("fpga", 2)
    (500, 1024, 2)
    """
    canon = canonical_name(name)
    if isinstance(value, bool):
        raise QuantityError(f"{canon}: a quantity must be a number or a string, not {value!r}")
    if isinstance(value, int):
        amount = Decimal(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"{canon}: quantity must be a finite number, not {value!r}")
        amount = Decimal(repr(value))
    elif isinstance(value, str):
        match = _QUANTITY_RE.match(value)
        if not match:
            raise QuantityError(
                f"{canon}: cannot parse quantity {value!r} (examples: 8, 500m, 64Gi)"
            )
        try:
            amount = Decimal(match["num"] + (match["exp"] or "")) * _SUFFIX[match["suffix"] or ""]
        except DecimalException as exc:  # an exponent beyond what Decimal holds (1e999999999)
            raise QuantityError(f"{canon}: quantity {value!r} is too large") from exc
    else:
        raise QuantityError(f"{canon}: a quantity must be a number or a string, not {value!r}")
    if amount < 0:
        raise QuantityError(f"{canon}: quantity must not be negative ({value!r})")
    try:
        scaled = amount * base_unit_scale(canon)
    except DecimalException as exc:
        raise QuantityError(f"{canon}: quantity {value!r} is too large") from exc
    if scaled > MAX_QUANTITY:
        raise QuantityError(f"{canon}: quantity {value!r} is too large")
    if scaled != scaled.to_integral_value():
        unit = (
            "milli-cores" if canon in _MILLI_UNIT else ("bytes" if canon in _BYTE_UNIT else "units")
        )
        raise QuantityError(
            f"{canon}: {value!r} is not a whole number of {unit}"
            + (f"; use {GPU_MILLI} for GPU shares" if canon == GPU else "")
        )
    return int(scaled)


def format_quantity(name: str, amount: int) -> str:
    """Render a base-unit amount the way a person would write it."""
    if name in _MILLI_UNIT:
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    if name in _BYTE_UNIT:
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            scale = int(_SUFFIX[suffix])
            if amount >= scale and amount % scale == 0:
                return f"{amount // scale}{suffix}"
    return str(amount)


def mebibytes(amount: int) -> int:
    """Bytes as Slurm's MiB, rounded up as Slurm rounds its sizes (``--mem=1500K``: 2)."""
    return -(-amount // 2**20)


def glance_quantity(name: str, amount: int) -> str:
    """A base-unit amount to read at a glance: a byte amount in the largest binary unit it
    reaches, to one decimal (``25275662336`` bytes → ``23.5Gi``; under a MiB as
    :func:`format_quantity` writes it); anything else as :func:`format_quantity` does."""
    if name in _BYTE_UNIT:
        for suffix in ("Ti", "Gi", "Mi"):
            scale = int(_SUFFIX[suffix])
            if amount >= scale:
                return f"{amount / scale:.1f}".removesuffix(".0") + suffix
    return format_quantity(name, amount)


class Resources(Mapping[str, int]):
    """An immutable, hashable bag of named integer quantities (zero entries dropped)."""

    __slots__ = ("_hash", "_items")

    def __init__(self, items: Mapping[str, int] | Iterable[tuple[str, int]] = ()) -> None:
        pairs = items.items() if isinstance(items, Mapping) else items
        clean: dict[str, int] = {}
        for key, amount in pairs:
            if not isinstance(amount, int) or isinstance(amount, bool):
                raise QuantityError(f"{key}: internal quantities must be integers, got {amount!r}")
            if amount < 0:
                raise QuantityError(f"{key}: quantity must not be negative ({amount})")
            if amount:
                clean[key] = clean.get(key, 0) + amount
        self._items: dict[str, int] = dict(sorted(clean.items()))
        self._hash: int | None = None

    @classmethod
    def parse(cls, spec: Mapping[str, str | int | float] | None) -> Resources:
        """Build from user input such as ``{"cpu": "500m", "memory": "2Gi", "gpu": 1}``."""
        if not spec:
            return cls()
        merged: dict[str, int] = {}
        for name, value in spec.items():
            canon = canonical_name(str(name))
            if canon in merged:
                raise QuantityError(f"resource {canon!r} is given twice")
            merged[canon] = parse_quantity(canon, value)
        return cls(merged)

    def __getitem__(self, key: str) -> int:
        return self._items[key]

    def get(self, key: str, default: int = 0) -> int:  # type: ignore[override]
        return self._items.get(key, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple(self._items.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Resources):
            return self._items == other._items
        return NotImplemented

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={format_quantity(k, v)}" for k, v in self._items.items())
        return f"Resources({inner})"

    def __add__(self, other: Mapping[str, int]) -> Resources:
        out = dict(self._items)
        for key, amount in other.items():
            out[key] = out.get(key, 0) + amount
        return Resources(out)

    def __sub__(self, other: Mapping[str, int]) -> Resources:
        out = dict(self._items)
        for key, amount in other.items():
            left = out.get(key, 0) - amount
            if left < 0:
                raise QuantityError(f"{key}: cannot take {amount} from {out.get(key, 0)}")
            out[key] = left
        return Resources(out)

    def scaled(self, factor: int) -> Resources:
        """Multiply every quantity by a whole factor (e.g. replicas × per-task request)."""
        return Resources({k: v * factor for k, v in self._items.items()})

    def fits_in(self, capacity: Mapping[str, int]) -> bool:
        """True when every quantity here is at most the same quantity in ``capacity``."""
        return all(amount <= capacity.get(key, 0) for key, amount in self._items.items())

    def to_spec(self) -> dict[str, str]:
        """The human-readable form accepted by :meth:`parse`."""
        return {k: format_quantity(k, v) for k, v in self._items.items()}
