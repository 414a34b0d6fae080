"""A refused submission takes no job numbers: the next accepted job gets the number the refused
one would have had, and an all-or-none batch refused on its last request leaves nothing behind."""

from __future__ import annotations

import pytest

from fusesched.controller.service import Controller
from fusesched.submit.errors import SubmitError
from fusesched.submit.request import JobRequest


def request(cpu: str = "1", **extra: object) -> JobRequest:
    return JobRequest.model_validate(
        {"groups": [{"resources": {"cpu": cpu}, "argv": ["true"]}], **extra}
    )


def test_refused_requests_leave_no_gap_in_the_job_numbers(ctl: Controller) -> None:
    (first,) = ctl.submit([request()])
    with pytest.raises(SubmitError, match="cpu"):
        # ten numbers, refused: fits no node
        ctl.submit([request(cpu="64", array={"start": 0, "stop": 9})])
    with pytest.raises(SubmitError, match="unknown job"):
        ctl.submit([request(dependencies=[{"kind": "afterok", "job_id": "999"}])])
    (second,) = ctl.submit([request()])
    assert int(second) == int(first) + 1


def test_a_batch_refused_on_its_last_request_stores_none_of_it(ctl: Controller) -> None:
    before = set(ctl.jobs)
    with pytest.raises(SubmitError):
        ctl.submit([request(), request(array={"start": 0, "stop": 3}), request(cpu="64")])
    assert set(ctl.jobs) == before
    (job,) = ctl.submit([request()])
    assert not ctl.persist.job_exists(str(int(job) + 1))
    assert ctl.persist.job_exists(job)


def test_only_the_last_allocation_can_be_given_back(ctl: Controller) -> None:
    first = ctl.persist.allocate_seqs(3)
    ctl.persist.allocate_seqs(1)
    with pytest.raises(ValueError, match="not the last allocated"):
        ctl.persist.release_seqs(first, 3)
