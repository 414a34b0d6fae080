"""``JobSpec.array_member``: one member of an array made alone, the same as the array's
expansion makes it (a restart recovers each stored member so: expanding the array for each
would cost the square of its size)."""

from __future__ import annotations

import pytest

from builders import job


def test_a_member_is_the_one_the_expansion_makes() -> None:
    spec = job("7").tasks(1, cpu=1).array(3, 11, step=4).build()  # 7_3, 7_7, 7_11
    assert [spec.array_member(m.id) for m in spec.expand_array()] == list(spec.expand_array())


@pytest.mark.parametrize("member", ["7_4", "7_15", "7_03", "7_", "7_x", "8_3", "7_-1", "7_٣"])
def test_no_such_member(member: str) -> None:
    spec = job("7").tasks(1, cpu=1).array(3, 11, step=4).build()
    with pytest.raises(ValueError, match=f"job {member} is not a member of array 7"):
        spec.array_member(member)


def test_a_job_that_is_no_array_has_no_members() -> None:
    plain = job("7").tasks(1, cpu=1).build()
    member = job("7").tasks(1, cpu=1).array(0, 1).build().expand_array()[0]
    for spec in (plain, member):
        with pytest.raises(ValueError, match="is not a member"):
            spec.array_member("7_0")
