"""The persistent store of the live controller: jobs, tasks, nodes and events.

SQLAlchemy over SQLite (the default, one file) or PostgreSQL; the schema is managed by the
Alembic migrations shipped in ``migrations/``. See docs/STORE.md.
"""

from fusesched.store.errors import (
    DuplicateJob,
    DuplicateTask,
    DuplicateToken,
    NoStore,
    StoreError,
    UnknownJob,
    UnknownNode,
    UnknownTask,
)
from fusesched.store.migrate import current_revision, head_revision, upgrade
from fusesched.store.records import (
    UNSET,
    EventRecord,
    EventRow,
    JobChange,
    JobDetail,
    JobRow,
    JobState,
    NodeRow,
    TaskChange,
    TaskRow,
    TokenKind,
    TokenRow,
)
from fusesched.store.store import Store

__all__ = [
    "UNSET",
    "DuplicateJob",
    "DuplicateTask",
    "DuplicateToken",
    "EventRecord",
    "EventRow",
    "JobChange",
    "JobDetail",
    "JobRow",
    "JobState",
    "NoStore",
    "NodeRow",
    "Store",
    "StoreError",
    "TaskChange",
    "TaskRow",
    "TokenKind",
    "TokenRow",
    "UnknownJob",
    "UnknownNode",
    "UnknownTask",
    "current_revision",
    "head_revision",
    "upgrade",
]
