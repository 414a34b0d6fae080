"""What every part of :class:`~fusesched.store.store.Store` stands on: its engines, and a
connection per call (one to read, or one transaction to write)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine

from fusesched.store.engine import make_engine, writer


class Connected:
    """The engines of the database at ``url``: each call takes its own pooled connection."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._engine: Engine = make_engine(url)
        self._writer: Engine = writer(self._engine)

    def close(self) -> None:
        self._engine.dispose()

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with self._engine.connect() as conn:
            yield conn

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """One transaction: all of it or none of it."""
        with self._writer.begin() as conn:
            yield conn
