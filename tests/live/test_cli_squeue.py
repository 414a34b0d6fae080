"""``fusesched jobs`` with squeue's options (-u -t -p -j -n --me -h, -o and -O formats) and
``fusesched show ARRAY_ID`` against a live controller, and ``GET /v1/jobs``'s list filters."""

from __future__ import annotations

import getpass
import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

from .conftest import local_cluster
from .test_cli import PYTHON, fusesched

ME = getpass.getuser()


def _job(name: str, user: str, queue: str, argv: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "user": user,
        "queue": queue,
        "groups": [{"resources": {"cpu": "1", "nvidia.com/gpu": "0"}, "argv": argv}],
        **extra,
    }


class Jobs:
    """The jobs the tests list, by what they are."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        client = Client(cluster.url)
        self.done = client.submit(_job("ok", "alice", "cpu", ["true"]))
        self.failed = client.submit(_job("bad", "alice", "cpu", ["false"]))
        self.timeout = client.submit(_job("slow", "bob", "gpu", ["sleep", "30"], walltime_s=1))
        self.running = client.submit(_job("train", "bob", "gpu", ["sleep", "120"], walltime_s=3600))
        self.held = client.submit(_job("later", ME, "gpu", ["true"], hold=True))
        self.cancelled = client.submit(_job("gone", "carol", "cpu", ["true"], hold=True))
        client.cancel(self.cancelled)
        self.array = client.submit(
            _job("sweep", "carol", "cpu", ["true"], hold=True, array={"start": 1, "stop": 3})
        )
        want = {
            self.done: "completed",
            self.failed: "failed",
            self.timeout: "timeout",
            self.running: "running",
        }
        deadline = time.monotonic() + 60
        while any(client.show(j)["phase"] != p for j, p in want.items()):
            assert time.monotonic() < deadline, [client.show(j) for j in want]
            time.sleep(0.2)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jobs]:
    with local_cluster(tmp_path_factory.mktemp("squeue") / "data") as cluster:
        yield Jobs(cluster)


def lines(jobs: Jobs, *args: str) -> list[str]:
    result = fusesched(jobs.cluster, "jobs", *args)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def ids(jobs: Jobs, *args: str) -> set[str]:
    return set(lines(jobs, "-h", "-o", "%i", *args))


def refused(jobs: Jobs, *args: str) -> str:
    result = fusesched(jobs.cluster, *args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return " ".join(result.stderr.split())


def members(jobs: Jobs) -> set[str]:
    return {f"{jobs.array}_{i}" for i in (1, 2, 3)}


def combined(jobs: Jobs) -> str:
    """The array's waiting members as one row (squeue without -r)."""
    return f"{jobs.array}_[1-3]"


def test_state_names_and_codes_pick_slurm_states(jobs: Jobs) -> None:
    assert ids(jobs, "-t", "R") == {jobs.running}
    assert ids(jobs, "-t", "PD") == {jobs.held, combined(jobs)}
    assert ids(jobs, "-r", "-t", "PD") == {jobs.held} | members(jobs)
    assert ids(jobs, "--states", "cd,f") == {jobs.done, jobs.failed}
    assert ids(jobs, "-t", "TIMEOUT") == {jobs.timeout}
    assert ids(jobs, "-t", "CA", "-t", "R") == {jobs.cancelled, jobs.running}
    assert ids(jobs, "--state", "Failed") == {jobs.failed}  # fusesched's own names too
    assert ids(jobs, "-t", "all") == ids(jobs)
    assert ids(jobs, "-t", "PR") == set()
    # no job here is completing (CG); Slurm states fusesched never has match nothing
    assert ids(jobs, "-t", "PD,R,CG") == ids(jobs, "-t", "PD,R")
    assert ids(jobs, "-t", "CG", "-t", "SUSPENDED") == set()
    assert lines(jobs, "-t", "CG", "-o", "%i") == ["JOBID"]


def test_users_queues_names_and_ids(jobs: Jobs) -> None:
    assert ids(jobs, "-u", "alice") == {jobs.done, jobs.failed}
    assert ids(jobs, "-u", "alice,bob") == {jobs.done, jobs.failed, jobs.timeout, jobs.running}
    assert ids(jobs, "--user", "alice", "-u", "carol", "-t", "CA") == {jobs.cancelled}
    assert ids(jobs, "-p", "gpu") == {jobs.timeout, jobs.running, jobs.held}
    assert ids(jobs, "--partition", "gpu", "--queue", "cpu", "-u", "bob") == {
        jobs.timeout,
        jobs.running,
    }
    assert ids(jobs, "-n", "ok,train") == {jobs.done, jobs.running}
    assert ids(jobs, "-j", f"{jobs.done},{jobs.array}_2") == {jobs.done, f"{jobs.array}_2"}
    assert ids(jobs, "-j", jobs.array) == {combined(jobs)}  # a whole array
    assert ids(jobs, "--array-members", "-j", jobs.array) == members(jobs)
    assert ids(jobs, "-j", f"{jobs.array},{jobs.running}", "-t", "R") == {jobs.running}
    assert ids(jobs, "--me") == {jobs.held}  # without a token: the local user name
    assert ids(jobs, "-u", "nobody-here") == set()


def test_limit_counts_matching_rows(jobs: Jobs) -> None:
    # the newest two of carol's rows (her array's waiting members: one), not two of
    # everyone's filtered afterwards
    assert ids(jobs, "-u", "carol", "--limit", "2") == {combined(jobs), jobs.cancelled}
    cut = fusesched(jobs.cluster, "jobs", "-r", "-u", "carol", "--limit", "2", "-o", "%i")
    assert cut.stdout.split() == ["JOBID", f"{jobs.array}_3", f"{jobs.array}_2"]
    assert "showing the newest 2 rows; --limit N for more" in cut.stderr
    script = fusesched(jobs.cluster, "jobs", "-r", "-u", "carol", "--limit", "2", "-h")
    assert script.stderr == "" and f"{jobs.array}_3" in script.stdout  # (-h: no note)
    assert ids(jobs, "-t", "CD,F,TO", "--limit", "3") == {jobs.done, jobs.failed, jobs.timeout}


def test_format_fields_widths_and_header(jobs: Jobs) -> None:
    # "%.6i": right-justified; "%-8j", "%5u": left (as squeue)
    out = lines(jobs, "-j", jobs.running, "-o", "%.6i|%-8j|%5u|%t|%T|%P|%D|%C|%l|%%")
    assert out == [
        " JOBID|NAME    |USER |ST|STATE|PARTITION|NODES|CPUS|TIME_LIMIT|%",
        f"{jobs.running:>6}|train   |bob  |R|RUNNING|gpu|1|1|1:00:00|%",
    ]
    assert lines(jobs, "-h", "-j", jobs.running, "-o", "%3j") == ["tra"]  # cut to the width
    assert lines(jobs, "-h", "-j", jobs.timeout, "-o", "%i %t %T %l") == [
        f"{jobs.timeout} TO TIMEOUT 0:01"
    ]
    held = lines(jobs, "-h", "-j", jobs.held, "-o", "%A %R %N %S %e %q %b %p %Q %M")
    assert held[0].startswith(f"{jobs.held} (") and held[0].endswith(
        " N/A N/A silver N/A 0.00000000000000 0 0:00"
    )
    (running,) = lines(jobs, "-h", "-j", jobs.running, "-o", "%R %V %S %e")
    nodelist, submitted, started, ends = running.split()
    assert not nodelist.startswith("(") and submitted[:4] == started[:4] == ends[:4]
    assert "T" in started and ends > started
    # the members of an array, lowest index last (newest first), with their array and index
    assert lines(jobs, "-h", "-r", "-j", jobs.array, "-o", "%F %K %t") == [
        f"{jobs.array} {i} PD" for i in (3, 2, 1)
    ]
    # without -r: as one row (as squeue), %A the array's id, %K the indices
    (row,) = lines(jobs, "-h", "-j", jobs.array, "-o", "%i|%A|%F|%K|%t|%R")
    assert row.startswith(f"{combined(jobs)}|{jobs.array}|{jobs.array}|1-3|PD|(held")


def test_long_format(jobs: Jobs) -> None:
    out = lines(jobs, "-j", jobs.running, "-O", "JobID:8,Name,StateCompact:.4,Partition:5")
    # each column WIDTH wide (Name: 20 by default), its value cut to it and padded to it, the
    # last too, nothing between the columns: as Slurm 22.05's squeue -O writes them
    assert out == [
        "JOBID   NAME                  STPARTI",
        f"{jobs.running:<8}train                  Rgpu  ",
    ]
    # a suffix after the width, no width: the value as long as it is (Open OnDemand's way)
    out = lines(jobs, "-h", "-j", jobs.running, "-O", "JobID:\x1f,Name:\x1f,StateCompact:")
    assert out == [f"{jobs.running}\x1ftrain\x1fR"]


def test_noheader_table_and_json(jobs: Jobs) -> None:
    table = lines(jobs, "-j", jobs.running)
    assert any("id" in line and "state" in line for line in table)
    bare = lines(jobs, "-h", "-j", jobs.running)
    assert not any("state" in line for line in bare) and any(jobs.running in x for x in bare)
    (view,) = json.loads("\n".join(lines(jobs, "--json", "-j", jobs.running)))
    assert (view["cpus"], view["gpus"], view["min_nodes"]) == (1, 0, 1)
    assert view["accelerators"] == {}


def test_bad_input_is_refused_with_a_reason(jobs: Jobs) -> None:
    said = refused(jobs, "jobs", "-t", "PD,XX")
    assert "unknown job state 'XX'" in said and "PD/PENDING" in said and "TO/TIMEOUT" in said
    said = refused(jobs, "jobs", "-o", "%i %@")
    assert "unknown format field %@" in said and "%i" in said
    assert "ends inside a field" in refused(jobs, "jobs", "-o", "%i %.5")
    assert "unknown field 'Bogus'" in refused(jobs, "jobs", "-O", "JobID,Bogus")
    assert "too wide (at most 1000)" in refused(jobs, "jobs", "-O", "JobID:5000")
    assert "bad job id 'abc'" in refused(jobs, "jobs", "-j", "12,abc")
    assert "bad job id '5_'" in refused(jobs, "jobs", "-j", "5_")
    assert "an empty user" in refused(jobs, "jobs", "-u", "alice,")
    assert "not both" in refused(jobs, "jobs", "-o", "%i", "-O", "JobID")
    assert "--json" in refused(jobs, "jobs", "-o", "%i", "--json")
    assert "empty --format" in refused(jobs, "jobs", "-o", "")
    assert "too wide (at most 1000)" in refused(jobs, "jobs", "-o", "%" + "9" * 5000 + "i")
    assert "wide in all" in refused(jobs, "jobs", "-o", "%900i" * 100)


def test_api_filters_are_checked(jobs: Jobs) -> None:
    def status(query: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"{jobs.cluster.url}/v1/jobs?{query}", timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    code, body = status("id=12&id=x1")
    assert code == 400 and "bad job id 'x1'" in body
    code, body = status("phase=sleeping")
    assert code == 400 and "unknown phase 'sleeping'" in body and "timeout" in body
    code, body = status("&".join(["user=u"] * 101))
    assert code == 400 and "at most 100 user values" in body
    code, body = status("name=")
    assert code == 400 and "empty name" in body
    code, body = status("user=" + "x" * 201)
    assert code == 400 and "at most 200 characters" in body
    code, body = status("me=true")  # no authentication: no caller to name
    assert code == 400 and "authentication is off" in body
    code, body = status("user=alice&user=bob&queue=gpu&state=Running&phase=timeout")
    assert code == 200
    assert {j["id"] for j in json.loads(body)} == {jobs.running, jobs.timeout}


def test_show_an_array_lists_its_members(jobs: Jobs) -> None:
    result = fusesched(jobs.cluster, "show", jobs.array)
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    assert out[0] == f"array {jobs.array}: 3 members: 3 PENDING"
    rows = [line.split()[0] for line in out if line.strip().startswith(f"{jobs.array}_")]
    assert rows == [f"{jobs.array}_{i}" for i in (1, 2, 3)]
    shown = json.loads(fusesched(jobs.cluster, "show", jobs.array, "--json").stdout)
    assert shown["array"] == jobs.array and shown["complete"] is True
    assert [m["id"] for m in shown["members"]] == [f"{jobs.array}_{i}" for i in (1, 2, 3)]
    missing = fusesched(jobs.cluster, "show", "99999")
    assert missing.returncode == 2 and "no job '99999'" in missing.stderr
    missing = fusesched(jobs.cluster, "show", "9" * 100)
    assert missing.returncode == 2 and f"no job '{'9' * 100}'" in missing.stderr


def test_me_with_a_token_is_the_tokens_user(tmp_path: Path) -> None:
    with local_cluster(tmp_path / "data", auth=True) as cluster:
        assert cluster.admin_token is not None
        admin = Client(cluster.url, token=cluster.admin_token)
        alice = admin.create_token("alice", tenant="default", role="user")["token"]
        theirs = admin.submit(_job("theirs", "bob", "cpu", ["true"], hold=True))
        mine = Client(cluster.url, token=alice).submit(_job("mine", "", "cpu", ["true"]))
        env = {"FUSESCHED_CONTROLLER": cluster.url, "PATH": "/usr/bin:/bin"}
        result = subprocess.run(
            [*PYTHON, "jobs", "--me", "-h", "-o", "%i %u"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**env, "FUSESCHED_TOKEN": alice},
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == [f"{mine} alice"]
        everyone = subprocess.run(
            [*PYTHON, "jobs", "-h", "-o", "%i", "-u", "alice,bob"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**env, "FUSESCHED_TOKEN": cluster.admin_token},
        )
        assert set(everyone.stdout.split()) == {mine, theirs}, everyone.stderr
