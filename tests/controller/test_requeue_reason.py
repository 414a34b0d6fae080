"""A job requeued with a back-off says when it may start again in the controller's local time,
not in the core's Unix seconds to six digits ("eligible at 1.79655e+09")."""

from __future__ import annotations

import time

from fusesched.controller.endings import readable_wait


def test_the_back_off_end_is_a_local_time() -> None:
    at = 1_796_550_123.0
    said = readable_wait(f"requeued (node n1 lost: requeued); eligible at {at:g}", at)
    when = time.strftime("%Y-%m-%d %H:%M:%S %z", time.localtime(at))
    assert said == f"requeued (node n1 lost: requeued); eligible at {when}"
    assert "e+09" not in said


def test_other_reasons_are_left_as_they_are() -> None:
    assert readable_wait("requeued (preempted)", 5.0) == "requeued (preempted)"
    assert readable_wait("eligible at 7", 5.0) == "eligible at 7"  # (not this job's time)
