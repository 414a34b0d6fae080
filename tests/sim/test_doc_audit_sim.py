"""Fixes from the audit of the simulation-side docs against real behaviour: clear errors
instead of tracebacks for bad input, and outputs that say what they mean."""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from fusesched.cli import train_policy
from fusesched.traces.swf import TraceFormatError, load_swf
from fusesched.twin.capacity import Answer, Question, Step
from fusesched.twin.report import capacity_markdown

from ._shared import SHARED, needs_shared

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import cli_args  # noqa: E402
import data_sim  # noqa: E402
import dl_sched  # noqa: E402
import energy_sim  # noqa: E402
import twin_philly  # noqa: E402

# --- twin plan: a p95 below one second is not printed as 0 ---------------------------------


def test_capacity_table_does_not_round_a_failing_p95_to_zero() -> None:
    question = Question(target_s=0.0, like="gpu-1", seeds=(0,), max_add=2)
    answer = Answer(question, "base", steps=[Step(0, 4, 32, [0.3]), Step(2, 6, 48, [0.01])])
    text = capacity_markdown(answer, "nodes like gpu-1")
    assert "| 0 | 4 | 32 | 0.3 | 0.3 | no |" in text
    assert "| 2 | 6 | 48 | 0.01 | 0.01 | no |" in text
    # large waits keep their whole-second form
    big = Answer(question, "base", steps=[Step(0, 4, 32, [2852.4])], added=0)
    assert "| 0 | 4 | 32 | 2852 | 2852 |" in capacity_markdown(big, "nodes")


# --- fusesched train-policy -------------------------------------------------------------------

app = typer.Typer()


@app.callback()
def _root() -> None:
    """test app"""


train_policy.register(app)
runner = CliRunner()


def _swf(path: Path) -> Path:
    lines = ["; MaxNodes: 4", "; MaxProcs: 16"]
    lines += [f"{i} {i * 60} 0 100 1 -1 -1 1 200 -1 1 1 1 1 1 1 -1 -1" for i in range(1, 50)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def no_training(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("training started although --out cannot be written")

    monkeypatch.setattr("fusesched.policies.learned.train.train", refuse)
    monkeypatch.setattr("fusesched.policies.learned.train.training_sequences", refuse)


@pytest.mark.usefixtures("no_training")
def test_train_policy_refuses_a_folder_as_out_before_training(tmp_path: Path) -> None:
    trace = _swf(tmp_path / "t.swf")
    result = runner.invoke(app, ["train-policy", "--traces", str(trace), "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "is a folder" in result.output
    assert "Traceback" not in result.output


@pytest.mark.usefixtures("no_training")
def test_train_policy_refuses_a_file_where_the_out_folder_should_be(tmp_path: Path) -> None:
    trace = _swf(tmp_path / "t.swf")
    (tmp_path / "afile").write_text("x")
    out = tmp_path / "afile" / "policy.json"
    result = runner.invoke(app, ["train-policy", "--traces", str(trace), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "a file stands where its folder should be" in result.output


def test_train_policy_takes_the_short_trace_names_of_simulate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = tmp_path / "traces" / "pwa-swf" / "SDSC-SP2-1998-4.2-cln.swf.gz"
    trace.parent.mkdir(parents=True)
    trace.write_bytes(gzip.compress(b"; MaxNodes: 1\n"))
    monkeypatch.setenv("FUSESCHED_SHARED", str(tmp_path))
    monkeypatch.chdir(tmp_path)  # no file called sdsc-sp2 here
    assert train_policy.resolve_traces("sdsc-sp2") == [trace]
    result = runner.invoke(app, ["train-policy", "--traces", "nope", "--out", "x.json"])
    assert result.exit_code == 2
    assert "sdsc-sp2" in result.output  # the error lists the short names


# --- a CSV given as an SWF trace ------------------------------------------------------------


def test_a_csv_given_as_swf_says_so(tmp_path: Path) -> None:
    path = tmp_path / "philly.csv"
    path.write_text("timestamp,duration,num_gpu\n0,100,1\n")
    with pytest.raises(TraceFormatError, match="looks like a CSV file"):
        load_swf(path)


# --- bench scripts: bad windows and names are usage errors, not tracebacks -----------------


@pytest.mark.parametrize("text", ["x", "9:3", "1:2:3"])
def test_dl_sched_rejects_a_bad_philly_window(text: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        dl_sched.main(["--philly-window", text])
    assert exit_.value.code == 2


def test_dl_sched_rejects_an_unknown_trace_instead_of_running_nothing(tmp_path: Path) -> None:
    (tmp_path / "traces").mkdir()
    with pytest.raises(SystemExit) as exit_:
        dl_sched.main(["--shared", str(tmp_path), "--traces", "cluster99", "--out", str(tmp_path)])
    assert exit_.value.code == 2
    assert not (tmp_path / "results.json").exists()


def test_dl_sched_reports_a_missing_philly_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "traces").mkdir()
    args = ["--shared", str(tmp_path), "--traces", "philly", "--out", str(tmp_path / "o")]
    assert dl_sched.main(args) == 2
    assert "error:" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["x", "5:2"])
def test_data_sim_rejects_a_bad_window(text: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        data_sim.main(["--window", text])
    assert exit_.value.code == 2


def test_data_sim_window_parses_days() -> None:
    assert cli_args.day_window("28:42") == (28.0, 42.0)


def test_energy_sim_refuses_an_empty_window_and_a_missing_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _swf(tmp_path / "t.swf")  # 49 jobs in the first hour
    common = ["--skip", "gpu", "vc", "--no-plots", "--out", str(tmp_path / "o")]
    assert energy_sim.main(["--swf", str(trace), "--swf-window", "100:101", *common]) == 2
    assert "no jobs submitted in the window" in capsys.readouterr().err
    assert energy_sim.main(["--swf", str(tmp_path / "none.swf"), *common]) == 2
    assert "No such file" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_twin_philly_rejects_bad_arguments() -> None:
    for argv in (["--days", "0"], ["--seeds", "a"]):
        with pytest.raises(SystemExit) as exit_:
            twin_philly.main(argv)
        assert exit_.value.code == 2


@needs_shared
def test_twin_philly_refuses_an_empty_window(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = SHARED / "traces" / "philly" / "philly.csv"
    argv = ["--trace", str(trace), "--start-day", "900", "--days", "1", "--out", str(tmp_path)]
    assert twin_philly.main(argv) == 2
    assert "no jobs submitted" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("script", "argv"),
    [
        ("gpu_placement_speed", ["--seeds", "x"]),
        ("gpu_placement_speed", ["--seeds", "5-1"]),
        ("cycle_speed", ["--placement", "nope", "--quick"]),
        ("pwr_openb", ["--seeds", "x"]),
        ("pwr_openb", ["--pods", "nope"]),
    ],
)
def test_bench_seeds_and_names_are_usage_errors(
    script: str, argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    if script == "pwr_openb" and not SHARED.exists():
        pytest.skip("../shared (the openb trace) is absent")
    module = __import__(script)
    monkeypatch.setattr(sys, "argv", [f"{script}.py", *argv])
    with pytest.raises(SystemExit) as exit_:
        module.main()
    assert exit_.value.code == 2
