"""``fusesched sacct`` against a live controller: finished jobs of several outcomes (completed,
failed with exit 3, cancelled while running, timed out) and waiting ones, their states and
exit codes as sacct prints them, the -S/-E window, -u/-a (default: your own jobs), -s, -j,
-P/-p, --json, and ``GET /v1/jobs``'s checked ``since``/``until``."""

from __future__ import annotations

import getpass
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

from .conftest import local_cluster
from .test_cli import fusesched

ME = getpass.getuser()


def _job(name: str, user: str, argv: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "user": user,
        "queue": "cpu",
        "groups": [{"resources": {"cpu": "1", "memory": "64Mi"}, "argv": argv}],
        **extra,
    }


class Jobs:
    """The jobs the tests account for, by outcome."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        client = Client(cluster.url)
        self.before = time.time() - 1
        self.done = client.submit(_job("ok", ME, ["true"]))
        self.failed = client.submit(_job("bad", ME, ["sh", "-c", "exit 3"]))
        self.timeout = client.submit(_job("slow", "bob", ["sleep", "30"], walltime_s=1))
        self.cancelled = client.submit(_job("stop", "bob", ["sleep", "60"]))
        self.held = client.submit(_job("later", "alice", ["true"], hold=True))
        deadline = time.monotonic() + 60
        while client.show(self.cancelled)["phase"] != "running":
            assert time.monotonic() < deadline, client.show(self.cancelled)
            time.sleep(0.2)
        client.cancel(self.cancelled)
        want = {
            self.done: "completed",
            self.failed: "failed",
            self.timeout: "timeout",
            self.cancelled: "cancelled",
        }
        while any(client.show(j)["phase"] != p for j, p in want.items()):
            assert time.monotonic() < deadline, [client.show(j) for j in want]
            time.sleep(0.2)
        self.after = time.time() + 1


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jobs]:
    with local_cluster(tmp_path_factory.mktemp("sacct") / "data", lambda a: a[:1]) as cluster:
        yield Jobs(cluster)


def lines(jobs: Jobs, *args: str) -> list[str]:
    result = fusesched(jobs.cluster, "sacct", *args)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def rows(jobs: Jobs, *args: str) -> dict[str, list[str]]:
    """``-P -n -o JobID,…``'s lines by job id."""
    return {line.split("|")[0]: line.split("|")[1:] for line in lines(jobs, "-P", "-n", *args)}


def ids(jobs: Jobs, *args: str) -> list[str]:
    return list(rows(jobs, "-o", "JobID", *args))


def test_states_and_exit_codes_as_sacct_prints_them(jobs: Jobs) -> None:
    found = rows(jobs, "-a", "-o", "JobID,State,ExitCode,User,JobName")
    assert found == {
        jobs.done: ["COMPLETED", "0:0", ME, "ok"],
        jobs.failed: ["FAILED", "3:0", ME, "bad"],
        # (ended by the controller: 0:0 on the job's row, as Slurm's; the signal shows on
        # its steps' rows)
        jobs.timeout: ["TIMEOUT", "0:0", "bob", "slow"],
        jobs.cancelled: ["CANCELLED", "0:0", "bob", "stop"],
        jobs.held: ["PENDING", "0:0", "alice", "later"],
    }
    assert list(found) == sorted(found, key=int)  # oldest first


def test_default_table_and_your_own_jobs(jobs: Jobs) -> None:
    table = lines(jobs)  # no -u, no -a: the caller's jobs (here: the local user's)
    assert table[0].split() == [
        "JobID",
        "JobName",
        "Partition",
        "Account",
        "AllocCPUS",
        "State",
        "ExitCode",
    ]
    assert set(table[1]) == {"-", " "}
    assert [line.split()[0] for line in table[2:]] == [jobs.done, jobs.failed]
    assert table[3].split() == [jobs.failed, "bad", "cpu", "default", "1", "FAILED", "3:0"]
    assert ids(jobs, "-u", "bob") == [jobs.timeout, jobs.cancelled]
    assert ids(jobs, "-u", "alice,bob") == [jobs.timeout, jobs.cancelled, jobs.held]


def test_the_window_and_filters(jobs: Jobs) -> None:
    every = [jobs.done, jobs.failed, jobs.timeout, jobs.cancelled, jobs.held]
    assert ids(jobs, "-a", "-S", "now-1hours") == every
    assert ids(jobs, "-a", "-S", "now-1hours", "-E", "now") == every
    assert ids(jobs, "-a", "-S", "2000-01-01", "-E", "2000-01-02T10:00") == []
    assert ids(jobs, "-a", "-S", "1960-01-01") == every  # (before Unix time: any time)
    assert ids(jobs, "-a", "-S", "1960-01-01", "-E", "1965-01-01") == []
    # starting after they ended: only what has not ended
    after = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(jobs.after + 5))
    assert ids(jobs, "-a", "-S", after) == [jobs.held]
    assert ids(jobs, "-a", "-s", "CD,F") == [jobs.done, jobs.failed]
    assert ids(jobs, "-a", "--state", "to", "-s", "CA") == [jobs.timeout, jobs.cancelled]
    assert ids(jobs, "-a", "-s", "PD") == [jobs.held]
    assert ids(jobs, "-a", "-s", "OOM,NF") == []
    assert ids(jobs, "-a", "-s", "RQ") == []
    assert ids(jobs, "-j", f"{jobs.failed},{jobs.held}", "-S", "2000-01-01") == [
        jobs.failed,
        jobs.held,
    ]
    assert ids(jobs, "-a", "--name", "ok,slow") == [jobs.done, jobs.timeout]
    assert ids(jobs, "-a", "-r", "gpu") == []
    assert ids(jobs, "-a", "-A", "default", "-X") == every
    assert ids(jobs, "-a", "-A", "other") == []


def test_parsable_json_and_usage_fields(jobs: Jobs) -> None:
    assert lines(jobs, "-P", "-j", jobs.failed, "-o", "JobID,State")[1] == f"{jobs.failed}|FAILED"
    assert lines(jobs, "-p", "-j", jobs.failed, "-o", "JobID,State") == [
        "JobID|State|",
        f"{jobs.failed}|FAILED|",
    ]
    shown = fusesched(jobs.cluster, "sacct", "--json", "-j", jobs.done, "-o", "jobid,elapsedraw")
    assert json.loads(shown.stdout) == [{"JobID": jobs.done, "ElapsedRaw": shown_raw(shown)}]
    fields = "JobID,ReqMem,MaxRSS,TotalCPU,NTasks,AllocTRES,NodeList%20"
    done = rows(jobs, "-j", jobs.done, "-o", fields)[jobs.done]
    assert done[0] == "64M" and done[3] == "1"
    assert done[4].startswith("cpu=1,mem=64M,node=1")
    assert done[5] == "node-a"
    held = rows(jobs, "-j", jobs.held, "-o", fields)[jobs.held]
    assert held[4:] == ["", "None assigned"]


def shown_raw(result: Any) -> str:
    value = json.loads(result.stdout)[0]["ElapsedRaw"]
    assert value.isdigit()
    return str(value)


def test_bad_input_is_refused_with_a_reason(jobs: Jobs) -> None:
    for args, message in [
        (["-o", "JobID,Bogus"], "unknown field 'Bogus'"),
        (["-s", "XX"], "unknown job state 'XX'"),
        (["-S", "someday"], "cannot read the --starttime 'someday'"),
        (["-E", ""], "an empty --endtime"),  # (not the default: nothing was meant)
        (["-S", "now", "-E", "now-1days"], "is after --endtime"),
        (["-j", "1x"], "bad job id"),
        (["-p", "-P"], "not both"),
        (["--json", "-P"], "leave out --parsable"),
    ]:
        result = fusesched(jobs.cluster, "sacct", *args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert message in " ".join(result.stderr.split()), (args, result.stderr)
        assert "Traceback" not in result.stderr
    for query, status, reason in [
        ("since=5&until=1", 400, "the window starts after it ends"),
        ("since=nan", 422, "since"),
        ("until=inf", 422, "until"),
        ("since=-1", 422, "since"),
        ("since=soon", 422, "since"),
    ]:
        url = f"{jobs.cluster.url}/v1/jobs?{query}"
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(url, timeout=10)
        assert caught.value.code == status, query
        assert reason in caught.value.read().decode(), query
