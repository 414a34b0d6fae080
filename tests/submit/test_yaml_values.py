"""A YAML value the reader recognises but cannot build (a timestamp whose zone is out of
range) is a clear error with its line, never an exception out of the parser (a 500)."""

from __future__ import annotations

import pytest

from fusesched.submit import SubmitError
from fusesched.submit.load import parse_submission

TEXT = 'name: x\nbegin: 2030-01-31T08:00:00+99:00\nresources: {cpu: 1}\ncommand: ["true"]\n'


@pytest.mark.parametrize("text", [TEXT, TEXT.replace("name: x", "name: é")])  # both readers
def test_a_timestamp_with_a_bad_zone_is_refused_with_its_line(text: str) -> None:
    with pytest.raises(SubmitError, match=r"^j\.yaml:2: a value cannot be read: .*quote"):
        parse_submission(text, source="j.yaml")
