"""``fusesched sinfo`` against a live controller (with authentication) and three agents: one
idle, one running a job (both in the default ``local`` pool), one drained with a reason (pool
``gpu``) — the default view, -N, -R, -t, -s, -o, --json and refused input."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from fusesched.agent.config import AgentConfig
from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

from .conftest import local_cluster
from .test_cli import PYTHON


@dataclass
class Nodes:
    cluster: LocalCluster
    token: str
    busy: str  # runs the job (1 of its 2 CPUs)
    idle: str


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    def unlabelled_first_two(agents: list[AgentConfig]) -> list[AgentConfig]:
        a, b, c = agents  # (a and b in the default pool, c in its own)
        return [a.model_copy(update={"labels": {}}), b.model_copy(update={"labels": {}}), c]

    data = tmp_path_factory.mktemp("sinfo") / "data"
    with local_cluster(data, unlabelled_first_two, auth=True) as cluster:
        token = cluster.admin_token
        assert token is not None
        client = Client(cluster.url, token=token)
        job = client.submit(
            {"name": "busy", "groups": [{"resources": {"cpu": "1"}, "argv": ["sleep", "120"]}]}
        )
        client.drain_node("node-c", "fan swap")
        deadline = time.monotonic() + 60
        while client.show(job)["state"] != "Running" or len(client.nodes()) < 3:
            assert time.monotonic() < deadline, client.show(job)
            time.sleep(0.2)
        (busy,) = client.show(job)["nodes"]
        idle = "node-b" if busy == "node-a" else "node-a"
        yield Nodes(cluster, token, busy, idle)


def sinfo(nodes: Nodes, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "FUSESCHED_CONTROLLER": nodes.cluster.url,
        "FUSESCHED_TOKEN": nodes.token,
        "PATH": "/usr/bin:/bin",
        "COLUMNS": "200",
        "TZ": os.environ.get("TZ", "UTC"),
    }
    return subprocess.run(
        [*PYTHON, "sinfo", *args], capture_output=True, text=True, timeout=60, env=env
    )


def lines(nodes: Nodes, *args: str) -> list[str]:
    result = sinfo(nodes, *args)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_default_view_a_line_per_partition_and_state(nodes: Nodes) -> None:
    first, second = sorted([(nodes.busy, "mix"), (nodes.idle, "idle")])
    assert lines(nodes) == [
        "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST",
        f"local*       up   infinite      1 {first[1]:>6} {first[0]}",
        f"local*       up   infinite      1 {second[1]:>6} {second[0]}",
        "gpu          up   infinite      1  drain node-c",
    ]


def test_node_oriented_and_long(nodes: Nodes) -> None:
    # (as Slurm 22.05's: at least 9 wide, right; the state %6t padded to its 6)
    assert lines(nodes, "-N", "-h") == [
        f"node-a         1    local* {'mix' if nodes.busy == 'node-a' else 'idle':<6}",
        f"node-b         1    local* {'mix' if nodes.busy == 'node-b' else 'idle':<6}",
        "node-c         1       gpu drain ",
    ]
    stamp, *long = lines(nodes, "-N", "-l", "-n", "node-c")
    assert re.fullmatch(r"\w{3} \w{3} \d{2} \d{2}:\d{2}:\d{2} \d{4}", stamp), stamp  # (as sinfo -l)
    assert long[0].split() == [  # (Slurm 22.05's sinfo -N -l)
        "NODELIST",
        "NODES",
        "PARTITION",
        "STATE",
        "CPUS",
        "S:C:T",
        "MEMORY",
        "TMP_DISK",
        "WEIGHT",
        "AVAIL_FE",  # (cut to the column's width, as sinfo cuts it)
        "REASON",
    ]
    shown = "node-c 1 gpu drained 4 4:1:1 4096 0 1 (null) fan swap"
    assert long[1].split() == shown.split()


def test_list_reasons_says_who_drained_and_when(nodes: Nodes) -> None:
    header, row = lines(nodes, "-R")
    assert header.split() == ["REASON", "USER", "TIMESTAMP", "NODELIST"]
    reason, user, stamp, listed = row[:20].strip(), row[21:30].strip(), row[31:50], row[51:]
    assert (reason, user, listed) == ("fan swap", "admin", "node-c")
    assert abs(time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S")) - time.time()) < 600


def test_states_summary_and_format(nodes: Nodes) -> None:
    assert lines(nodes, "-h", "-t", "drain", "-o", "%N %t %E") == ["node-c drain fan swap"]
    assert lines(nodes, "-h", "-t", "IDLE,mix", "-o", "%N") == ["node-a,node-b"]
    assert lines(nodes, "-h", "-t", "IDLE,mix", "-o", "%N", "-N") == ["node-a", "node-b"]
    assert lines(nodes, "-s", "-h", "-p", "local") == [
        "local*       up   infinite          1/1/0/2 node-a,node-b"
    ]
    assert lines(nodes, "-h", "-o", "%R %C %G") == [
        "local 1/3/0/4 (null)",
        "gpu 0/0/4/4 gpu:H200:2",
    ]


def test_json_lists_the_nodes(nodes: Nodes) -> None:
    found = json.loads(sinfo(nodes, "--json", "-t", "drain").stdout)
    assert [(n["name"], n["state"], n["reason"], n["reason_user"]) for n in found] == [
        ("node-c", "drain", "fan swap", "admin")
    ]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["-t", "sleepy"], "unknown node state 'sleepy'"),
        (["-o", "%P %q"], "unknown format field %q"),
        (["-n", "node[3-1]"], "runs backwards"),
        (["--bogus"], "No such option"),
    ],
)
def test_bad_input_is_refused_with_status_2(nodes: Nodes, args: list[str], says: str) -> None:
    result = sinfo(nodes, *args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert says in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr


def test_long_format_names(nodes: Nodes) -> None:
    """-O: sinfo's long names, each value cut to its width and padded to it, the last too
    (``:.9``: right-justified; NodeList: 20), as Slurm 22.05's sinfo writes them."""
    first, second = sorted([(nodes.busy, "mixed", "1/1/0/2"), (nodes.idle, "idle", "0/2/0/2")])
    got = lines(nodes, "-O", "PartitionName:7,StateLong:10,CPUsState:.9,Reason:10,NodeList")
    assert got == [
        f"{'PARTITI':<7}{'STATE':<10}{'CPUS(A/I/':>9}{'REASON':<10}{'NODELIST':<20}",
        *(f"{'local':<7}{s:<10}{c:>9}{'none':<10}{n:<20}" for n, s, c in (first, second)),
        f"{'gpu':<7}{'drained':<10}{'0/0/4/4':>9}{'fan swap':<10}{'node-c':<20}",
    ]
    refused = sinfo(nodes, "-O", "NodeList,Version")
    assert refused.returncode == 2
    assert "unknown field 'Version' in 'NodeList,Version'; known: available," in " ".join(
        refused.stderr.split()
    )


def test_iterate_until_ctrl_c(nodes: Nodes) -> None:
    """-i 1: the listing under the time, a blank line, again a second later; Ctrl-C ends it."""
    env = {
        "FUSESCHED_CONTROLLER": nodes.cluster.url,
        "FUSESCHED_TOKEN": nodes.token,
        "PATH": "/usr/bin:/bin",
        "COLUMNS": "200",
    }
    watching = subprocess.Popen(
        [*PYTHON, "sinfo", "-i", "1", "-t", "drain", "-o", "%N %t"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert watching.stdout is not None
        seen = [watching.stdout.readline() for _ in range(8)]  # two listings
        watching.send_signal(signal.SIGINT)
        _, err = watching.communicate(timeout=30)
    finally:
        watching.kill()
    for stamp, header, row, blank in (seen[:4], seen[4:]):
        assert abs(time.mktime(time.strptime(stamp.strip())) - time.time()) < 600
        assert (header, row, blank) == ("NODELIST STATE\n", "node-c drain\n", "\n")
    assert watching.returncode == 130
    assert "Traceback" not in err
