"""The errors the store raises. Each names the offending ids, so a caller can report them."""

from __future__ import annotations

from collections.abc import Iterable


class StoreError(RuntimeError):
    """Base class of every error the store raises on purpose."""


class NoStore(StoreError):
    """A store opened to be read (:meth:`~fusesched.store.Store.existing`) is not there."""


class _IdsError(StoreError):
    noun = "record"
    problem = "is wrong"

    def __init__(self, ids: Iterable[str], why: str = "") -> None:
        self.ids: tuple[str, ...] = tuple(sorted(set(ids)))
        shown = ", ".join(self.ids[:10]) + (" …" if len(self.ids) > 10 else "")
        problem = why or self.problem
        super().__init__(f"{self.noun} {problem}: {shown}")


class DuplicateJob(_IdsError):
    """A job id (or job sequence number) that is already in the store, or twice in one batch."""

    noun = "job"
    problem = "already exists"


class DuplicateTask(_IdsError):
    noun = "task"
    problem = "already exists"


class UnknownJob(_IdsError):
    noun = "job"
    problem = "not in the store"


class UnknownTask(_IdsError):
    noun = "task"
    problem = "not in the store"


class UnknownNode(_IdsError):
    noun = "node"
    problem = "not in the store"


class DuplicateToken(_IdsError):
    noun = "token"
    problem = "already exists"
