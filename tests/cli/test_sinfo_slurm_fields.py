"""``fusesched sinfo``: the ``-o`` letters and ``-O`` names scripts use that fusesched had
refused (``%e`` free memory, ``%X %Y %Z`` sockets, cores, threads, the partition settings
``%s %w %h %g %r %B``), and the time line above ``-l``, as Slurm 22.05's sinfo prints them."""

from __future__ import annotations

import time
from typing import Any

import pytest
from tests.cli.test_sinfo_format import info, out, view
from typer.testing import CliRunner

from fusesched.cli import sinfo_format as si
from fusesched.cli import sinfo_long as sl
from fusesched.cli.main import app

STAMP = "Mon Dec 07 19:10:00 2026"


def test_the_fields_scripts_ask_for_print_as_slurms() -> None:
    node = info("n1", capacity={"cpu": "4", "memory": "8Gi"})
    assert out([node], "%n %e %m %C %O") == ["n1 N/A 8192 0/4/0/4 N/A"]
    # (a node known by its CPU count alone: Slurm counts each CPU a one-core socket)
    assert out([node], "%z|%X|%Y|%Z|%c") == ["4:1:1|4|1|1|4"]
    assert out([node], "%s|%w|%h|%g|%r|%B") == ["1-infinite|1|NO|all|no|UNLIMITED"]
    header = si.lines(
        [node], si.parse("%e|%X|%Y|%Z|%s|%w|%h|%g|%r|%B"), node_oriented=False, header=True
    )
    assert header[0] == (
        "FREE_MEM|SOCKETS|CORES|THREADS|JOB_SIZE|WEIGHT|OVERSUBSCRIBE|GROUPS|ROOT|MAX_CPUS_PER_NODE"
    )


def test_sockets_split_lines_as_cpus_do() -> None:
    nodes = [info("n1"), info("n2", capacity={"cpu": "8", "memory": "8Gi"})]
    assert out(nodes, "%X %D %N") == ["4 1 n1", "8 1 n2"]


def test_the_long_names_are_the_letters_fields() -> None:
    pieces = sl.parse("FreeMem,Sockets,Cores,Threads,Weight,OverSubscribe,Groups,Root,Size")
    assert [p.field for p in pieces] == [si.FIELDS[k] for k in "eXYZwhgrs"]
    assert sl.parse("MaxCPUsPerNode")[0].field is si.FIELDS["B"]


def test_the_time_line_is_slurms(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        # (the day of the month with its zero, as Slurm's; time.ctime() pads with a blank)
        assert si.timestamp(1_796_670_600.0) == STAMP
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


class Nodes:
    def nodes(self) -> list[dict[str, Any]]:
        return [view("n1")]


@pytest.fixture
def sinfo(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr("fusesched.cli.sinfo._client", lambda *_a: Nodes())
    monkeypatch.setattr(si, "timestamp", lambda: STAMP)

    def run(*args: str) -> list[str]:
        result = CliRunner().invoke(app, ["sinfo", *args])
        assert result.exit_code == 0, result.output
        return result.output.splitlines()

    return run


def test_long_listings_start_with_the_time(sinfo: Any) -> None:
    for args in (["-l"], ["-N", "-l"], ["-l", "-s"], ["-l", "-R"]):
        lines = sinfo(*args)
        assert lines[0] == STAMP, (args, lines)
        assert lines[1].split()[0] in ("PARTITION", "NODELIST", "REASON"), (args, lines)
    assert sinfo("-o", "%n %e %m %C %O") == [
        "HOSTNAMES FREE_MEM MEMORY CPUS(A/I/O/T) CPU_LOAD",
        "n1 N/A 8192 0/4/0/4 N/A",
    ]


def test_no_time_line_without_l_or_with_h(sinfo: Any) -> None:
    assert sinfo()[0].split()[0] == "PARTITION"
    assert sinfo("-N")[0].split()[0] == "NODELIST"
    assert all(STAMP not in line for line in sinfo("-l", "-h"))
    assert STAMP not in "".join(sinfo("-l", "--json"))
