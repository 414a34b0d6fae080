"""``Store.member_phases``: an array's members in some phases, by id — what a restarted
controller reads of the members that ended before the restart (controller/dependencies.py),
two columns and not whole rows, on SQLite and PostgreSQL."""

from __future__ import annotations

from fusesched.store import Store
from store.rows import job


def test_the_members_in_the_phases_asked_for(store: Store) -> None:
    phases = {1: "completed", 2: "queued", 3: "failed", 4: "timeout"}
    store.add_jobs(
        [job(s, id=f"7_{s}", array_parent="7", phase=phase) for s, phase in phases.items()]
        + [job(5, phase="completed"), job(6, id="8_1", array_parent="8", phase="completed")]
    )
    assert store.member_phases("7", ["completed", "failed", "timeout", "cancelled"]) == {
        "7_1": "completed",
        "7_3": "failed",
        "7_4": "timeout",
    }
    assert store.member_phases("7", []) == {}
    assert store.member_phases("9", ["completed"]) == {}  # no such array
