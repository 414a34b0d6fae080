"""Every option of Slurm 22.05's squeue is taken by ``fusesched squeue`` (a click usage error
before broke tools that pass them): the filters the controller has no parameter for
(``-A -q -w -L -R``), ``-l``, ``-i``, ``-S``, ``-v``, ``-V``, ``--usage``, ``--yaml``, those
with nothing to do here, and Slurm's error for an unknown ``-j ID``. Against a fake
controller that answers ``GET /v1/jobs`` as asked (cli/squeue_options.py, squeue_plan.py,
squeue_filters.py)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from fusesched.cli import job_list
from fusesched.cli.main import app
from fusesched.cli.slurm_version import version_line
from fusesched.cli.squeue_options import USAGE, normalise_argv
from fusesched.client_base import ControllerError

Job = dict[str, Any]
DATE = re.compile(r"[A-Z][a-z]{2} [A-Z][a-z]{2} \d\d \d\d:\d\d:\d\d \d{4}")


def view(job_id: str, state: str = "Running", **fields: Any) -> Job:
    return {
        "id": job_id,
        "name": f"job{job_id}",
        "user": "ann",
        "tenant": "physics",
        "queue": "cpu",
        "qos": "silver",
        "state": state,
        "phase": state.lower(),
        "reason": "Priority" if state == "Pending" else "",
        "start_time": None if state == "Pending" else 100.0,
        "nodes": [] if state == "Pending" else ["n1"],
        "licenses": {},
        "array_parent": None,
        **fields,
    }


class Fake:
    """A controller: ``GET /v1/jobs`` filtered by ids and states (what it is asked is kept),
    the efficiency views of ``memory`` (bytes by id; others 404)."""

    token = None
    url = "http://fake"

    def __init__(self, views: list[Job], memory: dict[str, int] | None = None) -> None:
        self.views = views
        self.memory = memory or {}
        self.asked: list[dict[str, Any]] = []

    def jobs(self, user: Any = None, states: Any = (), queue: Any = None, limit: int = 50,
             array: Any = None, **kw: Any) -> list[Job]:  # fmt: skip
        self.asked.append({"states": tuple(states), "limit": limit, **kw})
        ids = kw.get("ids") or ()
        found = [v for v in self.views if not ids or v["id"] in ids]
        if states or kw.get("phases"):
            found = [v for v in found if v["state"] in states]
        return [dict(v) for v in found][:limit]

    def efficiency(self, job_id: str) -> dict[str, Any]:
        if job_id not in self.memory:
            raise ControllerError(404, f"no job {job_id!r}")
        return {"id": job_id, "memory_bytes": self.memory[job_id]}


def run(monkeypatch: pytest.MonkeyPatch, fake: Fake, *args: str, code: int = 0) -> Any:
    monkeypatch.setattr(job_list, "_client", lambda *a: fake)
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == code, result.output
    return result


JOBS = [
    view("5", tenant="Physics", nodes=["n1", "n2"], licenses={"matlab": 1}),
    view("4", qos="gold", nodes=["n3"]),
    view("3", "Pending", tenant="bio"),
]


@pytest.mark.parametrize(
    ("given", "read"),
    [
        (["-s"], ["--steps="]),
        (["-s", "-u", "ann"], ["--steps=", "-u", "ann"]),
        (["-s", "37.0"], ["-s", "37.0"]),
        (["-s37.0", "--step"], ["-s37.0", "--steps="]),
        (["--steps=1.2"], ["--steps=1.2"]),
        (["-n", "-s"], ["-n", "-s"]),  # (a job named -s)
        (["-hs", "-t", "all"], ["-h", "--steps=", "-t", "all"]),
        (["-j", "-l"], ["-l"]),
        (["-j", "5", "-S", "-t,i", "-s"], ["-j", "5", "-S", "-t,i", "--steps="]),
        (["--", "-s"], ["--", "-s"]),
    ],
)
def test_a_bare_steps_or_jobs_option_is_read_as_slurm_reads_it(
    given: list[str], read: list[str]
) -> None:
    assert normalise_argv(given) == read


def test_version_says_the_slurm_release_as_slurms_squeue(monkeypatch: pytest.MonkeyPatch) -> None:
    for args in (["squeue", "-V"], ["squeue", "--version", "-u", "x"], ["jobs", "-V"]):
        out = run(monkeypatch, Fake([]), *args).stdout
        assert out == version_line() + "\n"
    assert version_line() == "slurm 22.05.0"
    assert run(monkeypatch, Fake([]), "squeue", "--usage").stdout == USAGE


def test_options_with_nothing_to_do_here_are_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    plain = run(monkeypatch, Fake(JOBS), "squeue", "-h", "-o", "%i").stdout
    taken = ["-a", "--hide", "--local", "--federation", "--sibling", "-P", "--noconvert"]
    assert run(monkeypatch, Fake(JOBS), "squeue", *taken, "-Mall", "-h", "-o", "%i").stdout == plain
    assert plain.split() == ["3", "4", "5"]  # (squeue's order: PD before R, oldest first)


def test_filters_the_controller_lacks_read_the_newest_rows_and_keep_the_matching(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def ids(*args: str) -> list[str]:
        fake = Fake(JOBS)
        out: list[str] = run(monkeypatch, fake, "squeue", "-h", "-o", "%i", *args).stdout.split()
        assert fake.asked[0]["limit"] == job_list.MAX_MEMBERS
        return out

    assert ids("-A", "physics") == ["4", "5"]  # (accounts: any case)
    assert ids("-A", "bio", "-A", "nobody") == ["3"]
    assert ids("-q", "GOLD") == ["4"]
    assert ids("-w", "n[2-3]") == ["4", "5"]
    assert ids("-L", "matlab:1,abaqus") == ["5"]
    assert ids("-A", "physics", "-q", "silver") == ["5"]


def test_a_reservation_filter_needs_views_that_say_it(monkeypatch: pytest.MonkeyPatch) -> None:
    refused = run(monkeypatch, Fake(JOBS), "squeue", "-R", "maint", code=1)
    assert "does not show which reservation" in refused.stderr and refused.stdout == ""
    told = [view("7", reservation="maint"), view("6", reservation=None)]
    out = run(monkeypatch, Fake(told), "squeue", "-R", "maint", "-h", "-o", "%i|%v").stdout
    assert out == "7|maint\n"


def test_long_lines_come_after_a_date_and_iterate_repeats_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    date, header, *rows = run(monkeypatch, Fake(JOBS), "squeue", "-l").stdout.splitlines()
    assert DATE.fullmatch(date) and header.split()[4:7] == ["STATE", "TIME", "TIME_LIMI"]
    assert [row.split()[4] for row in rows] == ["PENDING", "RUNNING", "RUNNING"]
    assert run(monkeypatch, Fake(JOBS), "jobs", "-l", "-h").stdout.splitlines()[0].split()[0] == "5"

    rounds: list[float] = []

    def pause(seconds: float) -> None:
        rounds.append(seconds)
        if len(rounds) % 2 == 0:
            raise KeyboardInterrupt

    monkeypatch.setattr(job_list, "_pause", pause)
    out = run(monkeypatch, Fake(JOBS[:1]), "squeue", "-i", "5", code=130).stdout.split("\n")
    assert rounds == [5, 5] and out[3] == "" and out[7] == ""
    assert DATE.fullmatch(out[0]) and DATE.fullmatch(out[4]) and out[2] == out[6]
    quiet = run(monkeypatch, Fake(JOBS[:1]), "squeue", "-i", "1", "-h", "-o", "%i", code=130)
    assert quiet.stdout == "5\n\n5\n\n"  # (-h: no date, no header)


def test_sort_orders_the_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    out = run(monkeypatch, Fake(JOBS), "squeue", "-S", "-t,i", "-h", "-o", "%i").stdout
    assert out.split() == ["4", "5", "3"]  # (R before PD, descending; then ids ascending)
    bad = run(monkeypatch, Fake(JOBS), "squeue", "-S", "%i", code=2)
    assert "unknown sort field '%i'" in bad.stderr


def test_an_unknown_job_is_slurms_error_a_filtered_one_an_empty_listing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    missing = run(monkeypatch, Fake(JOBS), "squeue", "-j", "99", code=1)
    assert missing.stderr.strip() == "slurm_load_jobs error: Invalid job id specified"
    assert missing.stdout == ""
    known = run(monkeypatch, Fake(JOBS), "squeue", "-j", "3", "-t", "R").stdout
    assert known.split() == ["JOBID", "PARTITION", "NAME", "USER", "ST", "TIME", "NODES",
                             "NODELIST(REASON)"]  # fmt: skip
    assert run(monkeypatch, Fake(JOBS), "squeue", "-j", "98,99").stdout.count("\n") == 1
    assert run(monkeypatch, Fake(JOBS), "jobs", "-j", "99", "-h", "-o", "%i").stdout == ""


def test_yaml_is_the_json_data(monkeypatch: pytest.MonkeyPatch) -> None:
    as_json = json.loads(run(monkeypatch, Fake(JOBS), "squeue", "--json").stdout)
    assert yaml.safe_load(run(monkeypatch, Fake(JOBS), "squeue", "--yaml").stdout) == as_json
    assert json.loads(run(monkeypatch, Fake(JOBS), "squeue", "-l", "--json").stdout) == as_json
    both = run(monkeypatch, Fake(JOBS), "squeue", "--json", "--yaml", code=2)
    assert "--json or --yaml" in both.stderr


def test_memory_is_asked_only_when_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = Fake(JOBS, memory={"5": 4 * 2**30, "4": 1500 * 2**20})
    out = run(monkeypatch, fake, "squeue", "-h", "-o", "%i %m").stdout
    assert out.splitlines() == ["3 0", "4 1500M", "5 2G"]  # (5: on 2 nodes: 2G a node)
    out = run(monkeypatch, fake, "squeue", "-h", "-o", "%i %m", "--noconvert").stdout
    assert out.splitlines()[2] == "5 2048M"


def test_verbose_says_what_is_asked_on_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    result = run(monkeypatch, Fake(JOBS), "squeue", "-v", "-u", "ann", "-h", "-o", "%i")
    assert result.stdout.split() == ["3", "4", "5"]
    assert "users       = ann" in result.stderr and "controller  = http://fake" in result.stderr


def test_start_takes_the_new_filters_only_in_squeues_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    result = run(monkeypatch, Fake(JOBS), "jobs", "--start", "-A", "physics", code=2)
    assert "only in squeue's lines" in result.stderr
    result = run(monkeypatch, Fake(JOBS), "squeue", "-s", "1.0", "--start", code=2)
    assert "--steps (-s) or --start" in result.stderr


def test_localhost_is_this_host_and_an_empty_nodelist_is_refused() -> None:
    import socket

    from fusesched.cli.squeue_filters import parse

    assert parse(nodelist=["localhost,n[1-2]"]).nodes == {socket.gethostname(), "n1", "n2"}
    with pytest.raises(ValueError, match="--nodelist"):
        parse(nodelist=["n[1-"])
    with pytest.raises(ValueError, match="an empty account"):
        parse(accounts=["a,,b"])
    assert not parse().active()
