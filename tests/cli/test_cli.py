"""The `fusesched` command: comparisons, JSON and plot output, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fusesched.cli.main import app
from sample_traces import OPENB_NODES, OPENB_PODS, SMALL_SWF

SHARED = Path(__file__).resolve().parents[2].parent / "shared"

runner = CliRunner()


def test_help_lists_the_commands() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("simulate", "policies", "demo"):
        assert command in result.output


def test_help_paragraphs_wrap_and_keep_brackets() -> None:
    """Help texts are Markdown: a docstring's line breaks do not break the printed lines, and
    brackets stay literal (Rich markup took ``[seconds|minutes|…]`` for a tag and dropped it)."""
    wide = {"COLUMNS": "240"}
    update = runner.invoke(app, ["update", "--help"], env=wide)
    assert update.exit_code == 0
    assert "shorten a time limit; admins may change all." in update.output
    listing = runner.invoke(app, ["--help"], env=wide)
    assert "A running job cannot be held (cancel it)." in listing.output
    create = runner.invoke(app, ["reservation", "create", "--help"], env=wide)
    assert create.exit_code == 0
    assert "now+N[seconds|minutes|hours|days|weeks]" in create.output


def test_policies_lists_every_registered_name() -> None:
    result = runner.invoke(app, ["policies"])
    assert result.exit_code == 0
    names = ("fcfs", "wfp3-textbook", "priority", "conservative", "best-fit", "user-last2")
    more = ("fgd", "dot-product", "pwr+fgd", "pwr-guard", "tiresias", "gittins-burst")
    for name in (*names, *more, "default"):
        assert name in result.output


def test_simulate_synthetic_writes_json_and_plot(tmp_path: Path) -> None:
    out, png = tmp_path / "out.json", tmp_path / "out.png"
    result = runner.invoke(
        app,
        ["simulate", "synthetic", "-p", "fcfs,sjf", "--json", str(out), "--plot", str(png)],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert [r["policy"] for r in doc["results"]] == ["fcfs", "sjf"]
    for r in doc["results"]:
        assert r["backfill"] == "easy"
        metrics = r["metrics"]
        for key in ("avg_bounded_slowdown", "avg_wait_s", "utilization", "makespan_s"):
            assert isinstance(metrics[key], float)
        assert 0 < metrics["utilization"] <= 1
        assert metrics["avg_bounded_slowdown"] >= 1
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_simulate_a_small_swf_file_through_the_core(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    result = runner.invoke(
        app,
        [
            "simulate",
            str(SMALL_SWF),
            "-p",
            "fcfs",
            "--backfill",
            "conservative",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    (run,) = json.loads(out.read_text())["results"]
    assert run["backfill"] == "conservative"
    assert run["metrics"]["jobs"] > 0


def test_simulate_with_runtime_prediction_and_the_default_preset(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    args = ["simulate", str(SMALL_SWF), "-p", "sjf,default", "--backfill", "conservative"]
    args += ["--runtime-prediction", "user-last2", "--json", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    sjf, default = json.loads(out.read_text())["results"]
    assert sjf["backfill"] == "conservative"
    assert default["backfill"] == "easy"  # the preset brings its own backfilling
    assert default["metrics"]["jobs"] == sjf["metrics"]["jobs"] > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["simulate", "no-such-file.swf"], "no such trace file"),
        (["simulate", "synthetic", "-p", "bogus"], "unknown policy 'bogus'"),
        (["simulate", "synthetic", "--backfill", "sometimes"], "unknown backfill"),
        (["simulate", "synthetic", "--placement", "anywhere"], "unknown placement"),
        (["simulate", "synthetic", "--protocol", "mine"], "unknown protocol"),
        (
            ["simulate", str(SMALL_SWF), "--protocol", "rlscheduler", "--backfill", "conservative"],
            "only its own EASY",
        ),
        (["simulate", "synthetic", "--protocol", "rlscheduler"], "needs an SWF trace"),
        (["simulate", "synthetic", "-p", "priority", "--protocol", "rlscheduler"], "unknown"),
        (["simulate", "synthetic", "--runtime-prediction", "crystal-ball"], "unknown runtime"),
        (
            [
                "simulate",
                str(SMALL_SWF),
                "--protocol",
                "rlscheduler",
                "--runtime-prediction",
                "user-last2",
            ],
            "applies to --protocol full",
        ),
        (["simulate", str(Path(__file__).parent)], "is a folder, not a trace file"),
        (
            ["simulate", "synthetic", "--limit", "5", "--json", "/nonexistent-folder/out.json"],
            "cannot write /nonexistent-folder/out.json: No such file or directory",
        ),
        (["simulate", str(SMALL_SWF), "--protocol", "rlscheduler"], "jobs are too few"),
        (["controller", "--port", "99999"], "less than or equal to 65535"),
        (
            ["usage", "--db", "sqlite:////nonexistent-folder/x.db"],
            "no store at /nonexistent-folder",
        ),
        (["jobs", "--controller", "not-a-url"], "not a controller URL"),
        (["jobs", "--controller", "http://[::1"], "not a controller URL: 'http://[::1'"),
        (["jobs", "--controller", "http://h:port"], "not a controller URL: 'http://h:port'"),
        (["nodes", "--controller", "http://h:99999"], "Port out of range"),
        (["agent", "--controller", "notaurl"], "not a controller URL: 'notaurl'"),
        (["agent", "--controller", "http://127.0.0.1:99999"], "not a controller URL"),
        (["simulate", "synthetic", "--plot", "out.foo"], "cannot draw a .foo file"),
        (["jobs", "--controller", "https://127.0.0.1:1", "--ca", "/nonexistent.pem"], "CA"),
    ],
)
def test_bad_input_is_a_clear_error_not_a_traceback(args: list[str], message: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_malformed_trace_names_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.swf"
    bad.write_text("; MaxNodes: 4\n1 0 0 10 1 -1 -1 1 10 -1 1 1 1 1 1 1 -1 -1\n2 5 0 x 1\n")
    result = runner.invoke(app, ["simulate", str(bad)])
    assert result.exit_code == 2
    assert "bad.swf:3" in " ".join(result.output.split())


@pytest.mark.skipif(not SHARED.exists(), reason="../shared (real traces) is absent")
def test_rlscheduler_protocol_reproduces_the_published_fcfs_value(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    result = runner.invoke(
        app,
        ["simulate", "lublin-1", "--protocol", "rlscheduler", "-p", "fcfs", "--json", str(out)],
    )
    assert result.exit_code == 0, result.output
    (run,) = json.loads(out.read_text())["results"]
    assert round(run["metrics"]["avg_bounded_slowdown"], 2) == 235.82  # the README table
    assert len(run["sequences"]) == 10


def test_fgd_protocol_writes_the_required_metrics(tmp_path: Path) -> None:
    out, png = tmp_path / "fgd.json", tmp_path / "fgd.png"
    args = ["simulate", str(OPENB_NODES), str(OPENB_PODS), "--protocol", "fgd"]
    args += ["-p", "best-fit,fgd", "--seeds", "42-43", "--json", str(out), "--plot", str(png)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert [r["policy"] for r in doc["results"]] == ["best-fit", "fgd"]
    for r in doc["results"]:
        for key in ("gpu_alloc_pct_at_100", "gpu_alloc_pct_at_130", "unallocated_gpus_at_130"):
            assert key in r["metrics"]
        assert r["seeds"] == [42, 43]
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["simulate", str(OPENB_NODES), "--protocol", "fgd"], "needs a node list and a pod list"),
        (
            ["simulate", str(OPENB_NODES), str(OPENB_PODS), "--protocol", "fgd", "--seeds", "x"],
            "--seeds: expected",
        ),
        (
            ["simulate", str(OPENB_NODES), str(OPENB_PODS), "--protocol", "fgd", "-p", "sjf"],
            "unknown policy 'sjf' for --protocol fgd",
        ),
        (["simulate", str(OPENB_NODES), "nothing", "--protocol", "fgd"], "no such pod list"),
        (["simulate", "synthetic", str(OPENB_PODS)], "only taken by --protocol fgd"),
        (
            ["simulate", str(OPENB_NODES), str(OPENB_PODS), "--protocol", "fgd", "--seeds", "5-1"],
            "--seeds: empty range '5-1'",
        ),
        (
            ["simulate", "gpu_node", "default", "--protocol", "fgd", "--seeds", "1-99999999999"],
            "--seeds: at most 10,000 seeds",  # not a list of 10^11 seeds first
        ),
        # options a protocol does not read are refused, not silently ignored
        (
            ["simulate", "gpu_node", "default", "--protocol", "fgd", "--limit", "5"],
            "--protocol fgd does not use --limit: drop it",
        ),
        (
            ["simulate", "gpu_node", "default", "--protocol", "fgd", "--placement", "best-fit"],
            "--protocol fgd does not use --placement",
        ),
        (
            ["simulate", "philly", "--protocol", "dl", "--placement", "foo"],
            "--protocol dl does not use --placement",
        ),
        (
            ["simulate", "philly", "--protocol", "dl", "--runtime-prediction", "user-last2"],
            "--protocol dl does not use --runtime-prediction",
        ),
        (
            ["simulate", "synthetic", "--seeds", "1-3"],
            "--protocol full does not use --seeds: drop it (use --seed)",
        ),
    ],
)
def test_fgd_usage_errors(args: list[str], message: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


@pytest.mark.skipif(not SHARED.exists(), reason="../shared (real traces) is absent")
def test_rlscheduler_protocol_runs_the_default_preset_through_the_core(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    args = ["simulate", "lublin-1", "--protocol", "rlscheduler", "-p", "fcfs,default"]
    result = runner.invoke(app, [*args, "--json", str(out)])
    assert result.exit_code == 0, result.output
    fcfs, default = json.loads(out.read_text())["results"]
    assert default["backfill"] == "easy (core)"
    starts = [s["start_job_index"] for s in default["sequences"]]
    assert starts == [s["start_job_index"] for s in fcfs["sequences"]]  # the same sequences
    assert 1 <= default["metrics"]["avg_bounded_slowdown"] < fcfs["metrics"]["avg_bounded_slowdown"]


def test_controller_rejects_an_unknown_runtime_prediction(tmp_path: Path) -> None:
    args = ["controller", "--data-dir", str(tmp_path), "--runtime-prediction", "psychic"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "unknown runtime-prediction policy 'psychic'" in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_simulate_runs_the_shipped_learned_policy(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    result = runner.invoke(app, ["simulate", str(SMALL_SWF), "-p", "learned", "--json", str(out)])
    assert result.exit_code == 0, result.output
    (run,) = json.loads(out.read_text())["results"]
    assert run["policy"] == "learned" and run["metrics"]["jobs"] > 0


def test_unreadable_configuration_files_are_a_clear_error(tmp_path: Path) -> None:
    binary = tmp_path / "tenancy.yaml"
    binary.write_bytes(b"\xa5\x00\xff" * 100)
    result = runner.invoke(
        app, ["controller", "--data-dir", str(tmp_path), "--tenancy", str(binary)]
    )
    assert result.exit_code == 2, result.output
    assert "not UTF-8 text" in " ".join(result.output.split())
    result = runner.invoke(
        app,
        ["controller", "--data-dir", str(tmp_path), "--port", "0", "--db", f"sqlite:///{binary}"],
    )
    assert result.exit_code == 1, result.output
    assert "file is not a database" in " ".join(result.output.split())
    assert binary.read_bytes() == b"\xa5\x00\xff" * 100  # left as it was


def test_binary_power_and_agent_configurations_are_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # short paths: messages are not wrapped inside them
    Path("binary.yaml").write_bytes(b"\xa5\x00\xff" * 100)
    result = runner.invoke(app, ["controller", "--port", "0", "--power", "binary.yaml"])
    assert result.exit_code == 2, result.output
    assert "cannot read the power configuration binary.yaml: not UTF-8 text" in " ".join(
        result.output.split()
    )
    result = runner.invoke(app, ["agent", "--config", "binary.yaml"])
    assert result.exit_code == 2, result.output
    assert "cannot read the agent configuration binary.yaml: not UTF-8 text" in " ".join(
        result.output.split()
    )


@pytest.mark.parametrize("command", ["controller", "up"])
@pytest.mark.parametrize("data_dir", ["plain", "plain/data"])
def test_a_data_dir_that_is_a_file_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, data_dir: str
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("plain").write_text("not a folder\n")
    result = runner.invoke(app, [command, "--data-dir", data_dir, "--port", "0"])
    assert result.exit_code == 2, result.output
    assert "plain is a file, not a folder" in result.output
    assert Path("plain").read_text() == "not a folder\n"


def test_usage_on_a_store_that_does_not_exist_creates_none(tmp_path: Path) -> None:
    missing = tmp_path / "new.db"
    result = runner.invoke(app, ["usage", "--db", f"sqlite:///{missing}"])
    assert result.exit_code == 2, result.output
    assert "no store at" in result.output
    assert list(tmp_path.iterdir()) == []


def test_plot_prints_the_file_it_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["simulate", "synthetic", "--limit", "20", "--plot", "chart"])
    assert result.exit_code == 0, result.output
    assert "wrote chart.png" in result.output
    assert Path("chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not Path("chart").exists()


def test_a_bad_learned_policy_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    result = runner.invoke(app, ["simulate", str(SMALL_SWF), "-p", f"learned:{bad}"])
    assert result.exit_code == 2
    assert "bad.json" in " ".join(result.output.split())
    assert "Traceback" not in result.output
    result = runner.invoke(
        app, ["controller", "--data-dir", str(tmp_path), "--queue-order", f"learned:{bad}"]
    )
    assert result.exit_code == 2 and "Traceback" not in result.output
