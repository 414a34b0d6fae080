"""`fusesched train-policy` on a tiny hand-made trace: help, a trained file that loads, and
clear errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import typer
from typer.testing import CliRunner

from fusesched.cli import train_policy
from fusesched.policies.learned.model import load_model
from fusesched.policies.registry import CoreConfig


def synthetic_swf(path: Path, jobs: int = 240) -> Path:
    """A small SWF trace: 4 nodes of 4 CPUs, five users, loose walltime requests."""
    rng = np.random.default_rng(5)
    lines = ["; MaxNodes: 4", "; MaxProcs: 16"]
    t = 0
    for i in range(1, jobs + 1):
        t += int(rng.integers(0, 400))
        run, procs = int(rng.integers(5, 3000)), int(rng.choice([1, 2, 4, 8, 16]))
        request, user = run * int(rng.integers(1, 6)), int(rng.integers(1, 6))
        lines.append(f"{i} {t} 0 {run} {procs} -1 -1 {procs} {request} -1 1 {user} 1 1 1 1 -1 -1")
    path.write_text("\n".join(lines) + "\n")
    return path


app = typer.Typer()


@app.callback()
def _root() -> None:
    """test app"""


train_policy.register(app)
runner = CliRunner()


def test_help_explains_the_command() -> None:
    result = runner.invoke(app, ["train-policy", "--help"])
    assert result.exit_code == 0
    for option in ("--traces", "--lambda", "--out", "--budget", "--seed"):
        assert option in result.output


def test_trains_and_saves_a_policy_that_loads(tmp_path: Path) -> None:
    trace = synthetic_swf(tmp_path / "tiny.swf")
    out = tmp_path / "policy.json"
    args = ["train-policy", "--traces", str(trace), "--out", str(out), "--budget", "3"]
    args += ["--population", "2", "--sequences", "1", "--length", "64", "--seed", "4"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output
    model = load_model(out)
    assert model.meta["training"]["budget"] == 3
    assert model.meta["training"]["seed"] == 4
    assert model.meta["objective"]["lambda"] == 0.0
    assert "git_commit" in model.meta
    CoreConfig(queue_order=f"learned:{out}")  # usable by name


def test_missing_trace_is_a_clear_error(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["train-policy", "--traces", str(tmp_path / "nope.swf"), "--out", "x.json"]
    )
    assert result.exit_code == 2
    assert "no such trace file" in result.output
    assert "Traceback" not in result.output


def test_too_short_trace_is_a_clear_error(tmp_path: Path) -> None:
    trace = synthetic_swf(tmp_path / "tiny.swf", jobs=50)
    result = runner.invoke(
        app, ["train-policy", "--traces", str(trace), "--out", str(tmp_path / "x.json")]
    )
    assert result.exit_code == 2
    assert "cannot sample sequences" in result.output
