"""``sinfo %e %O`` (``-O FreeMem,CPUsLoad``) and ``scontrol show node``'s ``FreeMem=`` and
``CPULoad=``: what the node's agent last said, as Slurm prints them (free MiB, the 5-minute
load average with two decimals), ``N/A`` when not known; nodes whose figures differ go on
lines of their own. Pure, then against a real controller with an agent whose tasks only
pretend to run."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli.test_sinfo_format import info, out, view
from typer.testing import CliRunner

from fusesched.agent.client import AgentClient
from fusesched.agent.fake import FakeRuntime
from fusesched.api.wire import NodeInventory, NodeLoadWire
from fusesched.cli import sinfo_format as si
from fusesched.cli import sinfo_long as sl
from fusesched.cli.main import app
from fusesched.cli.scontrol import run
from fusesched.cli.scontrol_show import node_record, render
from fusesched.controller.server import ControllerServer

MIB = 2**20
SAID = {"free_memory_bytes": 12345 * MIB + 999, "load1": 0.1, "load5": 0.52}


def test_the_figures_print_as_slurms() -> None:
    node = info("n1", **SAID)
    assert out([node], "%e|%O") == ["12345|0.52"]  # (MiB rounded down; the 5-minute load)
    assert out([info("n1", **{**SAID, "load5": 3.0})], "%O") == ["3.00"]
    assert out([info("n1")], "%e|%O") == ["N/A|N/A"]  # (an agent older than them)
    bad = info("n1", free_memory_bytes="lots", load5=float("nan"))
    assert out([bad], "%e|%O") == ["N/A|N/A"]


def test_nodes_whose_figures_differ_go_on_lines_of_their_own() -> None:
    nodes = [info("n1", **SAID), info("n2", **SAID), info("n3")]
    assert out(nodes, "%D %N %e %O") == ["2 n[1-2] 12345 0.52", "1 n3 N/A N/A"]


def test_the_long_names() -> None:
    pieces = sl.parse("FreeMem,CPUsLoad")
    assert [p.field for p in pieces] == [si.FIELDS["e"], si.FIELDS["O"]]


def test_scontrol_writes_them_where_slurm_does() -> None:
    node = node_record({**view("n1"), **SAID})
    text = render([node], oneliner=True)
    assert "CPUAlloc=0 CPUTot=4 CPULoad=0.52 " in text
    assert "RealMemory=8192 FreeMem=12345 TmpDisk=0 " in text
    unknown = render([node_record(view("n2"))], oneliner=True)
    assert "CPULoad=N/A" in unknown and "FreeMem=N/A" in unknown


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    """A controller with two nodes: ``n1``'s agent says its figures, ``n2``'s (an agent
    older than them, as far as the controller sees) says none."""
    server = ControllerServer(tmp_path / "ctl", port=0, long_poll_s=0.1).start()
    said = NodeLoadWire(free_memory_bytes=2048 * MIB, load1=0.25, load5=0.75)
    agents = [
        AgentClient(
            server.url,
            NodeInventory(name=name, resources={"cpu": "1", "memory": "4Gi"}),
            FakeRuntime(time.time),
            long_poll_s=0.1,
            node_load=reader,
        )
        for name, reader in (("n1", lambda: said), ("n2", None))
    ]
    for agent in agents:
        agent.start()
    try:
        yield server.url
    finally:
        for agent in agents:
            agent.stop()
        server.stop()


def test_sinfo_and_scontrol_show_what_the_agents_said(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    deadline = time.monotonic() + 10
    while True:
        result = CliRunner().invoke(
            app, ["sinfo", "-N", "-h", "-o", "%N %e %O", "--controller", url]
        )
        assert result.exit_code == 0, result.output
        if result.output.splitlines() == ["n1 2048 0.75", "n2 N/A N/A"]:
            break
        assert time.monotonic() < deadline, result.output
        time.sleep(0.05)
    long = CliRunner().invoke(
        app, ["sinfo", "-N", "-h", "-O", "NodeList:5,FreeMem:6,CPUsLoad", "--controller", url]
    )
    assert long.exit_code == 0, long.output
    assert long.output.split() == ["n1", "2048", "0.75", "n2", "N/A", "N/A"]
    assert run(["-o", "show", "node", "n1"], url, None, None) == 0
    text = capsys.readouterr().out
    assert "CPULoad=0.75" in text and "FreeMem=2048" in text
