"""Begin times: Slurm's ``--begin`` forms read against a given ``now`` and time zone, and the
``sbatch --begin`` option and YAML ``begin`` field that use them."""

from __future__ import annotations

import datetime as dt
import re
from zoneinfo import ZoneInfo

import pytest

from fusesched.submit import SubmitError, parse_sbatch, parse_submission
from fusesched.submit.begin import begin_of, parse_begin

BERLIN = ZoneInfo("Europe/Berlin")


def at(*parts: int, tz: dt.tzinfo = BERLIN) -> float:
    return dt.datetime(*parts, tzinfo=tz).timestamp()  # type: ignore[misc]


NOW = at(2026, 3, 28, 15, 0)  # a Saturday afternoon, the eve of a change to summer time


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("now", NOW),
        ("NOW", NOW),
        ("now+90", NOW + 90),
        ("now+90seconds", NOW + 90),
        ("now+10minutes", NOW + 600),
        ("now + 2h", NOW + 7200),
        ("now+1hour", NOW + 3600),
        ("now+3days", NOW + 3 * 86400),
        ("now+1week", NOW + 7 * 86400),
        ("16:30", at(2026, 3, 28, 16, 30)),
        ("16:30:05", at(2026, 3, 28, 16, 30, 5)),
        ("14:00", at(2026, 3, 29, 14, 0)),  # passed today: tomorrow (in summer time)
        ("15:00", at(2026, 3, 29, 15, 0)),  # now is not after now
        ("noon", at(2026, 3, 29, 12, 0)),
        ("teatime", at(2026, 3, 28, 16, 0)),
        ("midnight", at(2026, 3, 29, 0, 0)),
        ("today", at(2026, 3, 28, 0, 0)),  # past: eligible at once
        ("tomorrow", at(2026, 3, 29, 0, 0)),
        ("2026-04-01", at(2026, 4, 1, 0, 0)),
        ("2026-04-01T08:00", at(2026, 4, 1, 8, 0)),
        ("2026-04-01T08:00:30", at(2026, 4, 1, 8, 0, 30)),
        ("2026-04-01T08:00:00Z", at(2026, 4, 1, 8, 0, tz=dt.UTC)),
        ("2026-04-01T08:00:00+02:00", at(2026, 4, 1, 8, 0)),
    ],
)
def test_forms(text: str, expected: float) -> None:
    assert parse_begin(text, NOW, BERLIN) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "an empty begin time"),
        ("someday", "cannot read the begin time 'someday' (use HH:MM[:SS]"),
        ("now+5fortnights", "unknown unit 'fortnights'"),
        ("now+99999999999", "more than 100 years ahead"),
        ("now-5", "cannot read the begin time"),
        ("25:00", "no such time of day"),
        ("2026-02-30", "day is out of range"),
        ("2026-04-01T08:61", "no such time of day"),
    ],
)
def test_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_begin(text, NOW, BERLIN)


def test_dates_and_times_from_yaml() -> None:
    assert begin_of(dt.date(2026, 4, 1), BERLIN) == at(2026, 4, 1, 0, 0)
    assert begin_of(dt.datetime(2026, 4, 1, 8, 0), BERLIN) == at(2026, 4, 1, 8, 0)
    aware = dt.datetime(2026, 4, 1, 8, 0, tzinfo=dt.UTC)
    assert begin_of(aware, BERLIN) == aware.timestamp()


def test_sbatch_begin_reads_against_now() -> None:
    script = "#!/bin/sh\n#SBATCH --begin=now+1hour\ntrue\n"
    assert parse_sbatch(script, now=1000.0).request.begin_time == 4600.0
    spec = parse_sbatch(script, args=["--begin", "now+60"], now=0.0).request.to_job_spec("1", 0)
    assert spec.begin_time == 60.0
    assert parse_sbatch("#!/bin/sh\ntrue\n").request.begin_time is None
    with pytest.raises(SubmitError, match=re.escape("job.sh:2: --begin: cannot read")):
        parse_sbatch("#!/bin/sh\n#SBATCH --begin=soon\ntrue\n", source="job.sh", now=0.0)


def test_yaml_begin() -> None:
    rest = "resources: {cpu: 1}\ncommand: [sleep, '1']\n"
    text = "begin: {}\n" + rest.replace("{", "{{").replace("}", "}}")
    (job,) = parse_submission(text.format("now+2minutes"), now=100.0)
    assert job.request.begin_time == 220.0
    (stamped,) = parse_submission(text.format("2030-01-31T08:00:00Z"), now=0.0)
    assert stamped.request.begin_time == at(2030, 1, 31, 8, 0, tz=dt.UTC)
    (quoted,) = parse_submission(text.format("'2030-01-31T08:00:00+00:00'"), now=0.0)
    assert quoted.request.begin_time == stamped.request.begin_time
    (raw,) = parse_submission("begin_time: 5000\n" + rest, now=0.0)
    assert raw.request.begin_time == 5000.0
    with pytest.raises(
        SubmitError, match=re.escape("<string>:1: cannot read the begin time 'whenever'")
    ):
        parse_submission(text.format("whenever"), now=0.0)
    with pytest.raises(SubmitError, match="expected a time such as now"):
        parse_submission(text.format("[1]"), now=0.0)
    with pytest.raises(SubmitError, match="give begin or begin_time, not both"):
        parse_submission("begin_time: 5\n" + text.format("now"), now=0.0)
