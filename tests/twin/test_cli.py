"""``fusesched twin …``: the commands work end to end; bad input gives a clear error and a
non-zero exit, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from tests.twin.builders import snapshot
from typer.testing import CliRunner

from fusesched.cli.twin import register
from fusesched.store.records import JobRow, JobState, NodeRow
from fusesched.store.store import Store
from fusesched.twin.snapshot import load, save

runner = CliRunner()


def app() -> typer.Typer:
    root = typer.Typer()
    register(root)

    @root.command()
    def version() -> None:  # a second command keeps `twin` a sub-command
        pass

    return root


@pytest.fixture
def snap_file(tmp_path: Path) -> Path:
    path = tmp_path / "s.json.gz"
    save(snapshot(60, tenancy=True), path)
    return path


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app(), ["twin", *args])
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def test_snapshot_reads_a_controllers_store(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    with Store(f"sqlite:///{data / 'fusesched.db'}") as store:
        store.upsert_node(NodeRow("n1", "127.0.0.1", 0.0, capacity={"cpu": "2"}))
        request = {"groups": [{"resources": {"cpu": "1"}, "argv": ["true"]}]}
        store.add_jobs(
            [
                JobRow(
                    "1",
                    1,
                    "u",
                    JobState.COMPLETED,
                    "completed",
                    5.0,
                    request,
                    start_time=5.0,
                    end_time=7.0,
                    exit_code=0,
                )
            ]
        )
    tenancy = tmp_path / "tenancy.yaml"
    tenancy.write_text("organisations: [{name: o, tenants: [{name: t, queues: [{name: q}]}]}]\n")
    out = tmp_path / "snap.json.gz"
    code, output = invoke(
        "snapshot",
        "--data-dir",
        str(data),
        "-o",
        str(out),
        "--tenancy",
        str(tenancy),
        "--backfill",
        "conservative",
    )
    assert code == 0, output
    assert "1 nodes, 1 jobs" in output
    snap = load(out)
    assert snap.core.backfill == "conservative" and snap.tenancy is not None


def test_run_compare_plan_and_validate(snap_file: Path, tmp_path: Path) -> None:
    code, output = invoke("run", str(snap_file), "--workers", "1", "--json")
    assert code == 0, output
    results = json.loads(output)
    assert [r["scenario"] for r in results] == ["observed", "twin"]
    a = tmp_path / "a.yaml"
    a.write_text("name: more\nnodes: {add: [{like: gpu-1, count: 1}]}\n")
    b = tmp_path / "b.yaml"
    b.write_text("name: fail\nfailures: [{at_s: 10, duration_s: 60, rack: r2}]\n")
    out = tmp_path / "report"
    code, output = invoke(
        "compare",
        str(snap_file),
        str(a),
        str(b),
        "--out",
        str(out),
        "--workers",
        "1",
        "--seeds",
        "0-1",
    )
    assert code == 0, output
    text = (out / "report.md").read_text()
    assert "| more | fail |" in text.replace("metric | ", "")
    assert (out / "metrics.png").stat().st_size > 1000
    assert (out / "tenants.png").exists() and (out / "waits.png").exists()
    code, output = invoke(
        "plan",
        str(snap_file),
        "--gpu-model",
        "H200",
        "--p95-below",
        "1000",
        "--seeds",
        "0",
        "--workers",
        "1",
        "--out",
        str(tmp_path / "cap"),
    )
    assert code == 0, output
    assert "Answer: add 0 node(s)" in output
    code, output = invoke("validate", str(snap_file))
    assert code == 0 and "per-job start-time error" in output


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["run", "missing.json"], "cannot read the snapshot missing.json"),
        (["compare", "{snap}", "missing.yaml"], "cannot read the scenario missing.yaml"),
        (["compare", "{snap}", "{bad}"], "bad.yaml: failures.0: give exactly one of"),
        (["compare", "{snap}", "{unfit}"], "unfit.yaml: nodes.add.0.like: no node 'x'"),
        (["run", "{snap}", "--seeds", "a"], "--seeds: expected e.g. 42-51"),
        (["run", "{snap}", "--seeds", "-3"], "whole numbers ≥ 0"),
        (["plan", "{snap}", "--p95-below", "5"], "name the node type"),
        (["plan", "{snap}", "--p95-below", "5", "--like", "a", "--gpu-model", "H200"], "not both"),
        (["plan", "{snap}", "--p95-below", "5", "--like", "zz", "--workers", "1"], "no node 'zz'"),
        (["compare", "{snap}", "{bad}", "--ray", "127.0.0.1:1"], "bad.yaml"),
        (["snapshot", "--data-dir", "nowhere"], "no store in nowhere"),
        (["snapshot", "--data-dir", ".", "--placement", "odd"], "unknown placement policy"),
        (["run", "{snap}", "--seeds", "0-99999999999"], "--seeds: at most 10,000 seeds"),
        (["snapshot", "--power", "{binary}"], "not UTF-8 text"),
        (["snapshot", "--db", "sqlite:///{missing}"], "no store at"),
    ],
)
def test_bad_input_is_a_clear_error(
    snap_file: Path, tmp_path: Path, args: list[str], expected: str
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("failures: [{at_s: 1}]\n")
    unfit = tmp_path / "unfit.yaml"
    unfit.write_text("nodes: {add: [{like: x}]}\n")
    binary = tmp_path / "power.bin"
    binary.write_bytes(b"\xa5\x00\xff" * 100)
    missing = tmp_path / "missing.db"
    paths = {
        "snap": str(snap_file),
        "bad": str(bad),
        "unfit": str(unfit),
        "binary": str(binary),
        "missing": str(missing),
    }
    code, output = invoke(*[a.format(**paths) for a in args])
    assert code == 2, output
    assert expected in " ".join(output.split()), output
    assert not missing.exists()  # a snapshot of a store that is not there creates none
