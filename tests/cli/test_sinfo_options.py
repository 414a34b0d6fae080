"""``fusesched sinfo``'s options that Slurm's 22.05 sinfo takes and scripts pass: ``-S``
(the lines' order), ``-T`` (the reservations in sinfo's layout), ``-r``/``-d`` (responding
or not), ``--yaml``, ``-V``, and those that change nothing here (``-a``, ``-e``,
``--noconvert``, ``-v``, ``-M``, ``--federation``, ``--local``, ``--hide``)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from fusesched.cli import sinfo as sinfo_cli
from fusesched.cli import sinfo_format as si
from fusesched.cli import sinfo_reservations as sr
from fusesched.cli import sinfo_sort
from fusesched.cli.main import app
from fusesched.cli.squeue_format import FormatError


def view(name: str, cpus: str = "4", memory: str = "8Gi", **fields: object) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": name,
        "state": "up",
        "address": "10.0.0.1",
        "capacity": {"cpu": cpus, "memory": memory},
        "free": {"cpu": cpus, "memory": memory},
        "labels": {},
        "devices": 0,
        "last_heartbeat_s_ago": 1.0,
        "drain_reason": None,
        "responding": True,
    }
    return base | fields


class Fake:
    def __init__(self, nodes: list[dict[str, Any]], reservations: list[dict[str, Any]]) -> None:
        self._nodes, self._reservations = nodes, reservations

    def nodes(self) -> list[dict[str, Any]]:
        return self._nodes

    def reservations(self) -> list[dict[str, Any]]:
        return self._reservations


RES: dict[str, Any] = {
    "name": "zz_helper_probe",
    "nodes": ["n1", "n2"],
    "start": 1_900_000_000.0,
    "end": 1_900_000_000.0 + 93_840,
    "users": ["root"],
    "tenants": [],
    "maintenance": False,
    "active": False,
}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Fake:
    nodes = [
        view("n10", cpus="8"),
        view("n2"),
        view("n1", responding=False),
        view("g1", labels={"fusesched.io/pool": "gpu"}),
    ]
    made = Fake(nodes, [RES])
    monkeypatch.setattr(sinfo_cli, "_client", lambda *args: made)
    return made


def sinfo(*args: str) -> Any:
    return CliRunner().invoke(app, ["sinfo", *args])


def test_sort_reads_slurms_items() -> None:
    keys = sinfo_sort.parse("+P,-m,%N,#P")
    assert [k.descending for k in keys] == [False, True, False, False]
    assert keys[0].field is si.FIELDS["P"] and keys[3].field is None
    for bad in ("x", "", "Pm"):
        with pytest.raises(FormatError, match="-S/--sort"):
            sinfo_sort.parse(bad)


def test_sort_orders_lines_numbers_as_numbers(fake: Fake) -> None:
    result = sinfo("-N", "-h", "-o", "%N %c", "-S", "-c,N")
    assert result.exit_code == 0, result.output
    assert result.stdout.split("\n")[:4] == ["n10 8", "g1 4", "n1 4", "n2 4"]
    result = sinfo("-N", "-h", "-o", "%N", "-S", "N")
    assert result.stdout.split() == ["g1", "n1", "n2", "n10"]  # (n2 before n10)
    assert sinfo("-S", "q").exit_code == 2


def test_responding_and_dead(fake: Fake) -> None:
    assert sinfo("-N", "-h", "-o", "%N", "-d").stdout.split() == ["n1"]
    assert sinfo("-N", "-h", "-o", "%N", "-r").stdout.split() == ["g1", "n2", "n10"]


def test_reservations_in_sinfos_layout() -> None:
    lines = sr.lines([RES], header=True)
    # (as Slurm 22.05's sinfo -T printed a reservation of that name and length)
    header = "RESV_NAME           STATE           START_TIME             END_TIME     DURATION"
    assert lines[0] == header + "  NODELIST"
    start, end = (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(RES[k])) for k in ("start", "end")
    )
    assert lines[1] == f"zz_helper_probe  INACTIVE  {start}  {end}   1-02:04:00  n[1-2]"
    short = sr.lines([RES | {"name": "zz", "active": True}], header=True)
    assert short[0].startswith("RESV_NAME     STATE ")  # (9 wide at least)
    assert short[1].startswith("zz           ACTIVE  ")
    assert sr.lines([], header=True) == ["No reservations in the system"]


def test_dash_t_lists_reservations_not_nodes(fake: Fake) -> None:
    result = sinfo("-T", "-o", "%P")  # (-o does not apply, as in Slurm)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("RESV_NAME ") and "zz_helper_probe" in result.stdout
    assert sinfo("-T", "-h").stdout.startswith("zz_helper_probe ")
    data = json.loads(sinfo("-T", "--json").stdout)
    assert data[0]["name"] == "zz_helper_probe" and data[0]["nodelist"] == "n[1-2]"
    fake._reservations = []
    assert sinfo("-T").stdout == "No reservations in the system\n"


def test_yaml_is_the_json_records(fake: Fake) -> None:
    result = sinfo("--yaml", "-n", "n2")
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.stdout) == json.loads(sinfo("--json", "-n", "n2").stdout)
    assert sinfo("--yaml", "--json").exit_code == 2


def test_version_and_the_options_that_change_nothing(fake: Fake) -> None:
    result = sinfo("-V")
    assert result.exit_code == 0 and result.stdout == "slurm 22.05.0\n"
    plain = sinfo("-h").stdout
    given = ["-a", "-e", "--noconvert", "-v", "-vv", "-M", "all", "--federation", "--local"]
    result = sinfo("-h", *given, "--hide")
    assert result.exit_code == 0, result.output
    assert result.stdout == plain


def test_summarize_then_node_then_reasons_choose_the_lines_as_slurms(fake: Fake) -> None:
    """Checked against Slurm 22.05's sinfo: ``-R -N`` prints ``-N``'s lines (of the nodes
    with a reason), ``-R -N -l`` the long ones, ``-R -s`` and ``-R -N -s`` ``-s``'s."""
    fake._nodes = [view("n1", state="drained", drain_reason="disk"), view("n2")]
    node_lines = sinfo("-R", "-N").stdout.splitlines()
    assert node_lines[0].split() == ["NODELIST", "NODES", "PARTITION", "STATE"]
    assert node_lines[1].split()[0] == "n1" and len(node_lines) == 2
    long = sinfo("-R", "-N", "-l").stdout.splitlines()
    assert long[1].split()[:4] == ["NODELIST", "NODES", "PARTITION", "STATE"]
    assert long[1].split()[-2:] == ["AVAIL_FE", "REASON"]
    for given in (["-R", "-s"], ["-R", "-N", "-s"]):
        assert sinfo(*given).stdout.split()[3] == "NODES(A/I/O/T)"
    assert sinfo("-R").stdout.split()[0] == "REASON"


def test_long_with_a_format_is_refused_as_slurms(fake: Fake) -> None:
    """Slurm 22.05's sinfo: ``Options -o(--format) and -l(--long) are mutually exclusive``,
    exit 1 (``-O`` too)."""
    for given in (["-l", "-o", "%P"], ["-O", "partition", "--long"], ["-R", "-l", "-o", "%N"]):
        result = sinfo(*given)
        assert result.exit_code == 1 and result.stdout == ""
        assert "-o(--format) and -l(--long) are mutually exclusive" in result.stderr
        assert "Traceback" not in result.output
