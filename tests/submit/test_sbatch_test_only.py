"""``--test-only`` belongs to the command (fusesched sbatch --test-only): a submission that
carries it (a script's directive, or options sent to the controller) is refused, never run."""

from __future__ import annotations

import pytest

from fusesched.submit.errors import SubmitError
from fusesched.submit.sbatch import parse_sbatch


def test_a_directive_is_refused_with_its_line() -> None:
    with pytest.raises(SubmitError, match=r"job\.sh:2: --test-only: it submits nothing"):
        parse_sbatch("#!/bin/sh\n#SBATCH --test-only\ntrue\n", source="job.sh")


def test_an_option_sent_along_is_refused() -> None:
    with pytest.raises(SubmitError, match="fusesched sbatch --test-only"):
        parse_sbatch("#!/bin/sh\ntrue\n", source="job.sh", args=["--test-only"])
