"""``fusesched reservation``: the window's forms and the refusals made before any controller is
asked (exit 2, a clear message). The commands against a live controller are in
tests/live/test_reservations_live.py."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from fusesched.cli.main import app
from fusesched.cli.reservations import window

runner = CliRunner()
NOW = 1_800_000_000.0


def test_the_window_from_an_end_or_a_duration() -> None:
    assert window("now", None, "2h", NOW) == (NOW, NOW + 7200)
    assert window("now+1h", "now+3h", None, NOW) == (NOW + 3600, NOW + 3 * 3600)
    assert window("now", None, "01:30:00", NOW) == (NOW, NOW + 5400)


@pytest.mark.parametrize(
    ("start", "end", "duration", "says"),
    [
        ("now", None, None, "give --end or --duration"),
        ("now", "now+1h", "1h", "give --end or --duration"),
        ("someday", None, "1h", "--start: cannot read the time 'someday'"),
        ("now", None, "unlimited", "--duration: a reservation needs an end"),
        ("now", None, "90", "--duration: duration '90' has no unit"),
        ("now", "later", None, "--end: cannot read the time 'later'"),
        ("now", None, "100000000d", "--duration: past the end of year 9999"),
    ],
)
def test_bad_windows_are_refused(
    start: str, end: str | None, duration: str | None, says: str
) -> None:
    with pytest.raises(ValueError, match="^" + says.replace("(", r"\(")):
        window(start, end, duration, NOW)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["bad name", "--nodes", "n1", "--start", "now", "--duration", "1h"],
            "invalid reservation",
        ),
        (["r", "--nodes", "n[1-", "--start", "now", "--duration", "1h"], "n[1-"),
        (["r", "--nodes", "n1", "--start", "now"], "give --end or --duration"),
    ],
)
def test_create_refuses_before_asking_the_controller(args: list[str], says: str) -> None:
    result = runner.invoke(
        app, ["reservation", "create", *args, "--controller", "http://127.0.0.1:9"]
    )
    assert result.exit_code == 2, result.output
    assert says in result.output


def test_times_are_shown_in_utc_as_the_controller_says_them() -> None:
    from fusesched.cli.reservations import _time

    assert _time(NOW) == "2027-01-15 08:00:00 UTC"
    assert _time(1e300) == "1e+300"  # (no OverflowError)


def test_a_changed_window_sends_only_what_is_given() -> None:
    from fusesched.cli.reservations import changed_window

    assert changed_window(None, None, None, NOW) == {}
    assert changed_window("now+1h", None, None, NOW) == {"start": NOW + 3600}
    assert changed_window(None, "now+3h", None, NOW) == {"end": NOW + 3 * 3600}
    assert changed_window(None, None, "90m", NOW) == {"duration_s": 5400.0}
    with pytest.raises(ValueError, match=r"^give --end or --duration, not both"):
        changed_window(None, "now+1h", "1h", NOW)
    with pytest.raises(ValueError, match=r"^--duration: a reservation needs an end"):
        changed_window(None, None, "unlimited", NOW)
    with pytest.raises(ValueError, match=r"^--start: cannot read the time 'someday'"):
        changed_window("someday", None, None, NOW)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["r"], "nothing to change"),
        (["r", "--end", "now+1h", "--duration", "1h"], "not both"),
        (["r", "--nodes", "n[1-"], "n[1-"),
        (["r", "--nodes", ""], "an empty host name"),
        (["r", "--duration", "0s"], "--duration: duration '0s' must be positive"),
    ],
)
def test_update_refuses_before_asking_the_controller(args: list[str], says: str) -> None:
    result = runner.invoke(
        app, ["reservation", "update", *args, "--controller", "http://127.0.0.1:9"]
    )
    assert result.exit_code == 2, result.output
    assert says in result.output
