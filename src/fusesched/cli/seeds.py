"""``--seeds``: the one parser of seed lists, for ``simulate --protocol fgd`` and ``twin``."""

from __future__ import annotations

#: Most seeds one ``--seeds`` may name (each is a whole run).
MAX_SEEDS = 10_000


class SeedsError(ValueError):
    """A ``--seeds`` value that is not a list of seeds; the message says why."""


def parse_seeds(text: str) -> list[int]:
    """``42-51`` or ``42,43,50`` (or a mix, spaces allowed) → the seeds, in the order given.

    Seeds are whole numbers ≥ 0 (what NumPy's generators take); at most :data:`MAX_SEEDS`.
    """
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        low, sep, high = part.partition("-")
        try:
            first = int(low)
            last = int(high) if sep else first
        except ValueError:
            raise SeedsError(
                f"--seeds: expected e.g. 42-51 or 42,43 (whole numbers ≥ 0), not {text!r}"
            ) from None
        if last < first:
            raise SeedsError(f"--seeds: empty range {part!r}")
        if len(seeds) + last - first + 1 > MAX_SEEDS:
            raise SeedsError(f"--seeds: at most {MAX_SEEDS:,} seeds")
        seeds.extend(range(first, last + 1))
    if not seeds:
        raise SeedsError("--seeds needs at least one seed")
    return seeds
