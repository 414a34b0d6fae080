"""``squeue`` reads Slurm's ``SQUEUE_*`` variables (and ``SLURM_CLUSTERS``,
``SLURM_TIME_FORMAT``) as its options' defaults, the command line winning, as Slurm 22.05's
squeue does (checked against a real one): ``export SQUEUE_FORMAT=...`` in a ``.bashrc``
works; a bad value is an error naming the variable, exit 1 (cli/squeue_env.py). ``fusesched
jobs`` reads none. The listings against a real controller whose agent only pretends to run
its tasks."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from tests.cli.conftest import pretend_cluster
from typer.testing import CliRunner

from fusesched.cli.main import app
from fusesched.cli.squeue_env import LISTS, TAKEN, EnvError, apply
from fusesched.cli.squeue_plan import Given, plan
from fusesched.sdk import Client

#: Every variable squeue reads: unset for each test (whatever the shell running it has).
ALL_VARS = (
    *LISTS,
    *TAKEN,
    "SQUEUE_ARRAY",
    "SQUEUE_FORMAT",
    "SQUEUE_FORMAT2",
    "SQUEUE_SORT",
    "SLURM_CLUSTERS",
    "SLURM_TIME_FORMAT",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ALL_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("name", "value", "field", "read"),
    [
        ("SQUEUE_ACCOUNT", "physics,bio", "accounts", ["physics,bio"]),
        ("SQUEUE_LICENSES", "matlab", "licenses", ["matlab"]),
        ("SQUEUE_NAMES", "train", "names", ["train"]),
        ("SQUEUE_PARTITION", "gpu,cpu", "queues", ["gpu,cpu"]),
        ("SQUEUE_QOS", "gold", "qos", ["gold"]),
        ("SQUEUE_STATES", "pd,R", "states", ["pd,R"]),
        ("SQUEUE_USERS", "ann,bob", "users", ["ann,bob"]),
        ("SQUEUE_SORT", "-t,i", "sort", "-t,i"),
        ("SQUEUE_FORMAT", "%.18i %.30j", "fmt", "%.18i %.30j"),
        ("SQUEUE_FORMAT2", "JobID,Name:30", "long_fmt", "JobID,Name:30"),
        ("SQUEUE_ARRAY", "", "each_member", True),  # (set at all, as Slurm's)
        ("SQUEUE_ARRAY", "0", "each_member", True),
        ("SLURM_TIME_FORMAT", "relative", "time_format", "relative"),
    ],
)
def test_each_variable_is_its_options_default(name: str, value: str, field: str, read: Any) -> None:
    assert getattr(apply(Given(), {name: value}), field) == read
    assert apply(Given(), {}) == Given()


def test_the_command_line_wins() -> None:
    env = {
        "SQUEUE_USERS": "ann",
        "SQUEUE_STATES": "R",
        "SQUEUE_SORT": "i",
        "SQUEUE_FORMAT": "%i",
        "SQUEUE_PARTITION": "gpu",
    }
    given = Given(users=["bob"], states=["PD"], sort="-i", fmt="%j")
    read = apply(given, env)
    assert (read.users, read.states, read.sort, read.fmt) == (["bob"], ["PD"], "-i", "%j")
    assert read.queues == ["gpu"]
    assert apply(Given(), env, me=True).users is None  # (--me: SQUEUE_USERS unread)
    assert apply(Given(long_fmt="JobID"), env).fmt is None  # (-O given: no SQUEUE_FORMAT)


@pytest.mark.parametrize(
    "given",
    [
        Given(long=True),
        Given(start=True),
        Given(steps=""),
        Given(as_json=True),
        Given(as_yaml=True),
        Given(fmt="%i"),
        Given(long_fmt="JobID"),
    ],
)
def test_a_listing_that_chooses_its_lines_reads_no_format_variable(given: Given) -> None:
    """As Slurm's: -l, --start and -s lines are their own (and JSON has none)."""
    read = apply(given, {"SQUEUE_FORMAT": "%i %t", "SQUEUE_FORMAT2": "JobID,State"})
    assert (read.fmt, read.long_fmt) == (given.fmt, given.long_fmt)


def test_format_comes_before_format2_and_empty_is_unset() -> None:
    both = apply(Given(), {"SQUEUE_FORMAT": "%i %t", "SQUEUE_FORMAT2": "JobID,State"})
    assert (both.fmt, both.long_fmt) == ("%i %t", None)
    empty = {name: "" for name in ALL_VARS if name != "SQUEUE_ARRAY"}
    assert apply(Given(), empty) == Given()
    assert apply(Given(), {"SQUEUE_USERS": "  "}).users is None


def test_steps_take_users_and_a_step_sort_not_states_nor_a_jobs_sort() -> None:
    steps = Given(steps="")
    read = apply(steps, {"SQUEUE_USERS": "ann", "SQUEUE_STATES": "PD", "SQUEUE_SORT": "-i"})
    assert (read.users, read.states, read.sort) == (["ann"], None, "-i")
    assert apply(steps, {"SQUEUE_SORT": "t,-p"}).sort is None  # (job letters: steps' own)
    with pytest.raises(EnvError, match="SQUEUE_SORT='%x'"):
        apply(steps, {"SQUEUE_SORT": "%x"})


def test_starts_own_json_takes_one_user_and_partition_only() -> None:
    env = {"SQUEUE_USERS": "ann", "SQUEUE_PARTITION": "a,b", "SQUEUE_STATES": "R"}
    read = apply(Given(start=True, as_json=True), env | {"SQUEUE_SORT": "i"})
    assert (read.users, read.queues, read.states, read.sort) == (["ann"], None, None, None)
    lines = apply(Given(start=True), env)
    assert (lines.users, lines.queues, lines.states) == (["ann"], ["a,b"], ["R"])


def test_the_taken_variables_change_nothing() -> None:
    assert apply(Given(), dict.fromkeys(TAKEN, "1")) == Given()


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("SQUEUE_STATES", "XX", "unknown job state 'XX'"),
        ("SQUEUE_USERS", "ann,,bob", "empty user"),
        ("SQUEUE_ACCOUNT", "a,,b", "empty account"),
        ("SQUEUE_SORT", "%i", "unknown sort field"),
        ("SQUEUE_FORMAT", "%i %!", "unknown format field %!"),
        ("SQUEUE_FORMAT2", "JobID,Bogus", "unknown field 'Bogus'"),
        ("SLURM_CLUSTERS", "other", "no cluster 'other'"),
        ("SLURM_TIME_FORMAT", "bogus", "no time format"),
    ],
)
def test_a_bad_value_names_the_variable(name: str, value: str, said: str) -> None:
    with pytest.raises(EnvError, match=f"^{name}={value!r}: .*{said}"):
        apply(Given(), {name: value})
    # (the option given, the variable is not read: no error)
    given = Given(
        users=["x"], states=["R"], accounts=["x"], sort="i", fmt="%i", time_format="standard"
    )
    apply(given, {name: value}, clusters_given=True)


def test_squeue_by_name_reads_them_and_jobs_does_not(tmp_path: Path) -> None:
    with pretend_cluster(tmp_path) as url:
        client = Client(url)
        [running] = client.submit(job("long-named-job-of-forty-characters-or-so"))
        [waiting] = client.submit(job("next"))
        until = time.monotonic() + 20
        while client.show(running)["state"] != "Running":
            assert time.monotonic() < until
            time.sleep(0.05)
        env = {"SQUEUE_FORMAT": "%.18i %.9P %.30j %.8u %.2t %.10M %.6D %R"}
        header, *rows = cli(url, "squeue", env=env).splitlines()
        assert header.split()[:3] == ["JOBID", "PARTITION", "NAME"]
        assert [row.split()[2] for row in rows] == ["next", "long-named-job-of-forty-charac"]
        assert cli(url, "squeue", "-h", "-o", "%i", env=env).split() == [waiting, running]
        assert cli(url, "squeue", "-h", env={"SQUEUE_FORMAT2": "JobID:8,State"}).split() == [
            waiting, "PENDING", running, "RUNNING"
        ]  # fmt: skip
        assert cli(url, "squeue", "-h", "-o", "%i", env={"SQUEUE_STATES": "R"}) == f"{running}\n"
        mixed = {"SQUEUE_STATES": "R", "SQUEUE_SORT": "-i"}
        assert cli(url, "squeue", "-h", "-o", "%i", "-t", "all", env=mixed).split() == [
            waiting, running
        ]  # fmt: skip
        assert cli(url, "squeue", "-h", "-o", "%i", env={"SQUEUE_USERS": "nobody"}) == ""
        assert cli(url, "squeue", "-h", "-o", "%i", env={"SQUEUE_NAMES": "next"}) == waiting + "\n"
        # fusesched's own command: its table, not the variables
        assert "NODELIST" not in cli(url, "jobs", env=env)
        assert cli(url, "jobs", "-h", "-o", "%i", env={"SQUEUE_STATES": "XX"}).split() == [
            waiting, running
        ]  # fmt: skip


def test_a_bad_variable_exits_1_naming_it_without_a_traceback() -> None:
    result = CliRunner().invoke(
        app, ["squeue", "--controller", "http://127.0.0.1:9"], env={"SQUEUE_STATES": "XX"}
    )
    assert result.exit_code == 1 and result.stdout == ""
    assert "SQUEUE_STATES='XX': unknown job state 'XX'" in result.stderr
    assert "Traceback" not in result.output
    bad_opt = CliRunner().invoke(app, ["squeue", "-t", "XX", "--controller", "http://x"])
    assert bad_opt.exit_code == 2  # (a bad option stays a usage error)


def test_plan_takes_the_time_format_for_the_time_fields() -> None:
    from fusesched.cli import squeue_format as sq

    read = plan(True, apply(Given(fmt="%i %V %M"), {"SLURM_TIME_FORMAT": "%s"}))
    assert read.pieces is not None
    line = sq.render(read.pieces, [{"id": "7", "submit_time": 1234.0}], header=False)
    assert line == ["7 1234 0:00"]


def job(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "groups": [
            {
                "resources": {"cpu": 1},
                "argv": ["sleep", "60"],
                "env": {"FUSESCHED_FAKE_DURATION": "60"},
            }
        ],
    }


def cli(url: str, *args: str, env: dict[str, str]) -> str:
    result = CliRunner().invoke(app, [*args, "--controller", url], env=env)
    assert result.exit_code == 0, result.output
    return result.stdout
