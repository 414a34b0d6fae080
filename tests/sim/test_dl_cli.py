"""``fusesched simulate --protocol dl`` on small hand-written Philly and ITP job lists."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from fusesched.cli.main import app
from fusesched.sim.dl.compare import compare_dl, load_dl_jobs

ITP = "job_id,submission_time,duration,num_gpu\n" + "\n".join(
    f"j{i},{i * 300},{600 + (i * 7919) % 20000},{[1, 1, 2, 4, 8][i % 5]}" for i in range(40)
)
PHILLY = "timestamp,duration,num_gpus,gpu_time,cluster\n" + "".join(
    f"2017-10-09 0{i // 10}:{(i % 10) * 5:02d}:00,{900 + (i * 4001) % 9000}.0,1,0,vc{i % 2}\n"
    for i in range(40)
)


def test_dl_protocol_compares_policies_and_writes_json(tmp_path: Path) -> None:
    trace = tmp_path / "cluster77.csv"
    trace.write_text(ITP)
    out = tmp_path / "r.json"
    result = CliRunner().invoke(
        app,
        [
            "simulate",
            str(trace),
            "--protocol",
            "dl",
            "-p",
            "fifo,tiresias,gittins",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "gittins" in result.output and "FIFO/x" in result.output
    doc = json.loads(out.read_text())
    assert doc["protocol"] == "dl"
    assert [r["policy"] for r in doc["results"]] == ["fifo", "tiresias", "gittins"]
    fifo = doc["results"][0]["metrics"]["avg_jct_s"]
    assert doc["results"][2]["fifo_over_this"] == fifo / doc["results"][2]["metrics"]["avg_jct_s"]


def test_dl_protocol_reads_philly_lists(tmp_path: Path) -> None:
    trace = tmp_path / "philly.csv"
    trace.write_text(PHILLY)
    jobs = load_dl_jobs(trace)
    assert len(jobs) == 40 and {j.tag for j in jobs} == {"vc0", "vc1"}
    cluster, runs = compare_dl(jobs, ["fifo", "sjf-oracle", "gittins"])
    assert cluster.total_gpus >= 8
    assert [r.policy for r in runs] == ["fifo", "sjf-oracle", "gittins"]


def test_dl_protocol_errors_are_usage_errors(tmp_path: Path) -> None:
    trace = tmp_path / "cluster77.csv"
    trace.write_text("job_id,submission_time,duration,num_gpu\na,1,x,1\n")
    runner = CliRunner()
    bad_row = runner.invoke(app, ["simulate", str(trace), "--protocol", "dl"])
    assert bad_row.exit_code == 2
    assert "cluster77.csv:2: duration is not a number" in bad_row.output.replace("\n", "")
    trace.write_text(ITP)
    bad_policy = runner.invoke(app, ["simulate", str(trace), "--protocol", "dl", "-p", "srpt"])
    assert bad_policy.exit_code == 2
    assert "unknown policy 'srpt'" in bad_policy.output
