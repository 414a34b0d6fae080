"""Real jobs through fusesched to a real Slurm (slurmctld + slurmd on this machine).

The controller routes HPC jobs to a Slurm pool and everything else to its local agents; Slurm
runs what it is given under an unprivileged account (``nobody``), and fusesched reads back
states, exit codes and output, cancels, and charges the usage to the job's tenant.
Needs root (Slurm's daemons, ``sbatch --uid``): ``make test`` runs as root in CI, where
``scripts/system_deps.sh`` installs slurm-wlm and munge and this module starts the daemons.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fusesched.backends.federation_config import parse_federation
from fusesched.cli.local import LocalCluster
from fusesched.policies.registry import CoreConfig
from fusesched.sdk import Client

from .conftest import agent_configs

ROOT = Path(__file__).resolve().parents[2]
SLURM_SCRIPT = ROOT / "scripts" / "slurm_local.sh"
#: The test cluster's own licenses (slurm.conf's ``Licenses=``): a job handed to Slurm with
#: licenses needs them defined there.
SLURM_LICENSES = "fluent:2"


def _slurm_up() -> bool:
    done = subprocess.run(["bash", str(SLURM_SCRIPT), "status"], capture_output=True, check=False)
    if done.returncode != 0:
        return False
    shown = subprocess.run(
        ["scontrol", "show", "licenses"], capture_output=True, text=True, check=False
    )
    return "LicenseName=fluent" in shown.stdout  # (else: started without them, by another)


def _start_slurm() -> None:
    """Slurm started afresh, with :data:`SLURM_LICENSES`."""
    env = {**os.environ, "SLURM_LOCAL_SET": f"Licenses={SLURM_LICENSES}"}
    subprocess.run(["bash", str(SLURM_SCRIPT), "start", "default"], check=True, env=env)


@pytest.fixture(scope="module")
def slurm() -> None:
    """A running single-node Slurm with :data:`SLURM_LICENSES` (started here when not)."""
    if os.geteuid() != 0 or shutil.which("slurmctld") is None:
        if os.environ.get("CI"):
            pytest.fail("CI runs as root with slurm-wlm installed (scripts/system_deps.sh)")
        pytest.skip("needs root and slurm-wlm (scripts/system_deps.sh installs it)")
    if not _slurm_up():
        _start_slurm()


HPC_RULE = {"name": "hpc-to-slurm", "match": {"types": ["hpc"]}, "pools": ["hpc"]}


def federation(log_dir: Path, hpc_rule: dict[str, Any] = HPC_RULE, **slurm_options: Any) -> Any:
    return parse_federation(
        {
            "pools": [
                {"name": "cpu", "kind": "local"},
                {"name": "gpu", "kind": "local"},
                {
                    "name": "hpc",
                    "kind": "slurm",
                    "options": {
                        "partition": "debug",
                        "default_user": "nobody",
                        "log_dir": str(log_dir),
                        **slurm_options,
                    },
                },
            ],
            "rules": [
                hpc_rule,
                {"name": "ai-to-gpu", "match": {"types": ["ai-train"]}, "pools": ["gpu", "cpu"]},
            ],
            "default": ["cpu", "gpu"],
        },
        "test",
    )


def _start(
    tmp_path: Path,
    hpc_rule: dict[str, Any] = HPC_RULE,
    core: CoreConfig | None = None,
    **slurm_options: Any,
) -> Iterator[tuple[LocalCluster, Path]]:
    shared = Path(tempfile.mkdtemp(prefix="fusesched-slurm-"))
    shared.chmod(0o755)
    logs = shared / "slurm-logs"
    cluster = LocalCluster(
        tmp_path / "data",
        port=0,
        agents=agent_configs(shared),
        core=core,
        long_poll_s=0.5,
        federation=federation(logs, hpc_rule, **slurm_options),
    )
    try:
        with cluster:
            yield cluster, shared
    finally:
        shutil.rmtree(shared, ignore_errors=True)


@pytest.fixture
def fed(slurm: None, tmp_path: Path) -> Iterator[tuple[LocalCluster, Path]]:
    yield from _start(tmp_path)


def hpc(argv: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "name": extra.pop("name", "hpc-job"),
        "type": "hpc",
        "tenant": extra.pop("tenant", "physics"),
        "user": "alice",
        "groups": [{"resources": {"cpu": 1, "memory": "100Mi"}, "argv": argv}],
        **extra,
    }


def wait_job(client: Client, job_id: str, states: set[str], timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    view: dict[str, Any] = {}
    while time.monotonic() < deadline:
        view = client.show(job_id)
        if view["state"] in states:
            return view
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} still {view.get('state')}: {view}")


def wait_for_pool(client: Client, pool: str = "hpc", timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(n["name"].startswith(pool + ":") for n in client.nodes()):
            return
        time.sleep(0.2)
    raise AssertionError(f"pool {pool} listed no node")


def squeue_state(external: str) -> str:
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-j", external, "-o", "%T"],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip()


def test_jobs_run_in_slurm_and_come_back(fed: tuple[LocalCluster, Path]) -> None:
    cluster, _ = fed
    client = Client(cluster.url)
    wait_for_pool(client)
    ok = client.submit(hpc(["/bin/sh", "-c", "echo from-slurm; id -un"]))
    bad = client.submit(hpc(["/bin/sh", "-c", "echo failing >&2; exit 3"], name="bad"))
    view = wait_job(client, ok, {"Completed", "Failed"})
    assert view["state"] == "Completed" and view["exit_code"] == 0, view
    assert all(n.startswith("hpc:") for n in view["nodes"])
    log = client.logs(ok)
    assert "from-slurm" in log and "nobody" in log  # ran in Slurm, never as root
    failed = wait_job(client, bad, {"Completed", "Failed"})
    assert failed["state"] == "Failed" and failed["exit_code"] == 3, failed
    assert "failing" in client.logs(bad)
    assert view["pool"] == "hpc" and view["tasks"][0]["external_id"].isdigit()


def test_cancel_reaches_slurm(fed: tuple[LocalCluster, Path]) -> None:
    cluster, _ = fed
    client = Client(cluster.url)
    wait_for_pool(client)
    job = client.submit(hpc(["sleep", "300"], name="sleeper"))
    deadline = time.monotonic() + 30
    external = ""
    while time.monotonic() < deadline and not external:
        tasks = client.show(job)["tasks"]
        external = (tasks[0].get("external_id") or "") if tasks else ""
        time.sleep(0.2)
    assert external, "the job never reached Slurm"
    while time.monotonic() < deadline and squeue_state(external) != "RUNNING":
        time.sleep(0.2)
    client.cancel(job)
    view = wait_job(client, job, {"Cancelled"})
    assert view["state"] == "Cancelled"
    assert squeue_state(external) in ("CANCELLED", "COMPLETING", "")


def test_mixed_workload_and_usage(fed: tuple[LocalCluster, Path]) -> None:
    """One submit: HPC to Slurm, AI training to the local GPU pool; usage per tenant."""
    cluster, _ = fed
    client = Client(cluster.url)
    wait_for_pool(client)
    ids = client.submit_many(
        [
            hpc(["/bin/sh", "-c", "sleep 2; echo hpc-done"], tenant="physics"),
            {
                "name": "train",
                "type": "ai-train",
                "tenant": "ml",
                "groups": [{"resources": {"cpu": 1}, "argv": ["/bin/sh", "-c", "sleep 1"]}],
            },
        ]
    )
    views = [wait_job(client, i, {"Completed", "Failed"}) for i in ids]
    assert [v["state"] for v in views] == ["Completed", "Completed"], views
    assert views[0]["nodes"][0].startswith("hpc:")
    assert views[1]["nodes"] == ["node-c"]  # the local GPU pool
    listed = {j["id"]: j for j in client.jobs(states=["Completed", "Failed"], limit=500)}
    assert {ids[0], ids[1]} <= listed.keys()
    usage = client.usage(by=["tenant"])
    rows = {r["group"]["tenant"]: r for r in usage["rows"]}
    assert rows["physics"]["cpu_hours"] > 0 and rows["ml"]["cpu_hours"] > 0


def test_overflow_to_local_agents_when_slurm_is_full(slurm: None, tmp_path: Path) -> None:
    """HPC jobs prefer Slurm; once its node is full, the next one starts on a local agent."""
    overflow = {**HPC_RULE, "pools": ["hpc", "cpu"]}
    for cluster, _ in _start(tmp_path, overflow):
        client = Client(cluster.url)
        wait_for_pool(client)
        slurm_cpus = sum(
            int(n["capacity"]["cpu"]) for n in client.nodes() if n["name"].startswith("hpc:")
        )
        ids = [client.submit(hpc(["sleep", "4"], name=f"wide-{k}")) for k in range(slurm_cpus + 1)]
        views = [wait_job(client, i, {"Running", "Completed", "Failed"}) for i in ids]
        pools = [v["pool"] for v in views]
        assert pools[:slurm_cpus] == ["hpc"] * slurm_cpus, views
        assert pools[slurm_cpus] == "cpu", views
        ended = [wait_job(client, i, {"Completed", "Failed"}) for i in ids]
        assert [v["state"] for v in ended] == ["Completed"] * len(ids), ended


def test_rejected_job_fails_with_slurms_reason(slurm: None, tmp_path: Path) -> None:
    for cluster, _ in _start(tmp_path, sbatch_args=["--reservation=no-such-reservation"]):
        client = Client(cluster.url)
        wait_for_pool(client)
        job = client.submit(hpc(["true"]))
        view = wait_job(client, job, {"Completed", "Failed"})
        assert view["state"] == "Failed"
        assert "rejected" in view["reason"] and "reservation" in view["reason"].lower()


def test_jobs_start_in_their_submit_folder(fed: tuple[LocalCluster, Path]) -> None:
    """As Slurm's sbatch: the folder the job was submitted from (``submit_dir``, which sbatch
    and run send), a ``-D`` relative to it, or a ``-D`` of its own; a folder the node lacks is
    Slurm's to handle (it says so and runs the job in ``/tmp``)."""
    cluster, shared = fed
    client = Client(cluster.url)
    wait_for_pool(client)
    home = shared / "home"
    (home / "inner").mkdir(parents=True)
    show = ["/bin/sh", "-c", "pwd; echo $SLURM_SUBMIT_DIR"]
    here = client.submit(hpc(show, submit_dir=str(home)))
    inner = hpc(show, name="inner", submit_dir=str(home))
    inner["groups"][0]["workdir"] = "inner"
    own = hpc(show, name="own", submit_dir=str(home))
    own["groups"][0]["workdir"] = str(shared)
    gone = client.submit(hpc(show, name="gone", submit_dir=str(shared / "gone")))
    ids = [here, client.submit(inner), client.submit(own), gone]
    views = [wait_job(client, i, {"Completed", "Failed"}) for i in ids]
    assert [v["state"] for v in views] == ["Completed"] * 4, views
    assert client.logs(here) == f"{home}\n{home}\n"
    assert client.logs(ids[1]) == f"{home / 'inner'}\n{home}\n"
    assert client.logs(ids[2]) == f"{shared}\n{home}\n"
    moved = client.logs(gone).splitlines()
    assert f"couldn't chdir to `{shared / 'gone'}'" in moved[0], moved
    assert moved[-2:] == ["/tmp", str(shared / "gone")]


def test_licenses_go_to_slurm(slurm: None, tmp_path: Path) -> None:
    """A job's licenses are asked of Slurm too (``--licenses``): it holds them there while it
    runs. One the Slurm cluster does not define is refused by its slurmctld: the job fails
    with its reason."""
    core = CoreConfig(placement="best-fit", licenses=(("abaqus", 1), ("fluent", 2)))
    for cluster, _ in _start(tmp_path, core=core):
        client = Client(cluster.url)
        wait_for_pool(client)
        held = "scontrol show job $SLURM_JOB_ID | grep -o 'Licenses=[^ ]*'"
        job = client.submit(hpc(["/bin/sh", "-c", held], licenses={"fluent": 2}))
        undefined = client.submit(hpc(["true"], name="undefined", licenses={"abaqus": 1}))
        view = wait_job(client, job, {"Completed", "Failed"})
        assert view["state"] == "Completed", view
        assert client.logs(job).strip() == "Licenses=fluent:2"
        refused = wait_job(client, undefined, {"Completed", "Failed"})
        assert refused["state"] == "Failed", refused
        assert "Invalid license specification" in refused["reason"], refused


def test_registry_image_needs_a_kubernetes_pool(fed: tuple[LocalCluster, Path]) -> None:
    cluster, _ = fed
    with httpx.Client(base_url=cluster.url) as http:
        reply = http.post(
            "/v1/jobs",
            json={"groups": [{"resources": {"cpu": 1}, "argv": ["true"], "image": "python:3.11"}]},
        )
    assert reply.status_code == 400
    assert "registry images run only in kubernetes pools" in reply.text


def test_route_explains(fed: tuple[LocalCluster, Path], scratch: Path) -> None:
    """`fusesched route JOB --explain` and a dry run of a job file, as a user types them."""
    cluster, _ = fed
    client = Client(cluster.url)
    wait_for_pool(client)
    job = client.submit(hpc(["true"]))
    wait_job(client, job, {"Completed", "Failed"})
    answer = client.route(job)
    assert answer["pools"] == ["hpc"] and answer["rule"] == "hpc-to-slurm"
    assert answer["pool"] == "hpc"
    env = {"FUSESCHED_CONTROLLER": cluster.url, "PATH": "/usr/bin:/bin", "COLUMNS": "200"}
    shown = subprocess.run(
        [sys.executable, "-m", "fusesched", "route", job, "--explain"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert f"{job}: hpc (rule hpc-to-slurm); runs in hpc" in shown.stdout
    assert "rule 'hpc-to-slurm' matches" in shown.stdout
    spec = scratch / "train.yaml"
    spec.write_text('name: t\ntype: ai-train\nresources: {cpu: 1}\ncommand: ["true"]\n')
    dry = subprocess.run(
        [sys.executable, "-m", "fusesched", "route", str(spec), "--explain"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert dry.returncode == 0, dry.stderr
    assert ": gpu → cpu (rule ai-to-gpu)" in dry.stdout and "gpu preferred" in dry.stdout


def test_controller_restart_adopts_the_slurm_job(slurm: None, scratch: Path) -> None:
    """SIGKILL the controller while Slurm runs its job: the new controller follows the same
    Slurm job to its end (it is neither lost nor submitted twice)."""
    import yaml

    from .test_recovery import FUSESCHED, free_port

    pools = scratch / "pools.yaml"
    logs = scratch / "slurm-logs"
    pools.write_text(
        yaml.safe_dump(
            {
                "pools": [
                    {
                        "name": "hpc",
                        "kind": "slurm",
                        "options": {"default_user": "nobody", "log_dir": str(logs)},
                    }
                ],
                "default": ["hpc"],
            }
        )
    )
    port = free_port()
    argv = [FUSESCHED, "controller", "--data-dir", str(scratch / "data"), "--port", str(port)]
    argv += ["--no-auth", "--pools", str(pools)]
    client = Client(f"http://127.0.0.1:{port}")

    def start() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                client.health()
                return proc
            except Exception:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)

    proc = start()
    try:
        wait_for_pool(client)
        job = client.submit(hpc(["/bin/sh", "-c", "echo begin; sleep 6; echo end"]))
        deadline = time.monotonic() + 30
        external = ""
        while time.monotonic() < deadline and squeue_state(external) != "RUNNING":
            tasks = client.show(job)["tasks"]
            external = (tasks[0].get("external_id") or "") if tasks else ""
            time.sleep(0.2)
        assert squeue_state(external) == "RUNNING"
        proc.kill()
        proc.wait()
        proc = start()
        view = wait_job(client, job, {"Completed", "Failed"})
        assert view["state"] == "Completed", view
        assert view["tasks"][-1]["external_id"] == external  # followed, not resubmitted
        log = client.logs(job)
        assert log.count("begin") == 1 and "end" in log
    finally:
        proc.kill()
        proc.wait()


def test_slurm_down_then_back(slurm: None, tmp_path: Path) -> None:
    """Slurm's daemons stop: a job routed there waits (Pending, with the reason) and is never
    lost; once Slurm is back the pool's nodes return and the job runs. Runs last: it restarts
    Slurm afresh."""
    for cluster, _ in _start(tmp_path):
        client = Client(cluster.url)
        wait_for_pool(client)
        subprocess.run(["bash", str(SLURM_SCRIPT), "stop"], check=True, capture_output=True)
        try:
            job = client.submit(hpc(["/bin/sh", "-c", "echo after-outage"]))
            deadline = time.monotonic() + 60
            down = False
            while time.monotonic() < deadline and not down:
                states = [n["state"] for n in client.nodes() if n["name"].startswith("hpc:")]
                down = bool(states) and all(s == "down" for s in states)
                time.sleep(0.3)
            assert down, "the pool's node was not marked down"
            view = client.show(job)
            assert view["state"] == "Pending", view
        finally:
            _start_slurm()
        view = wait_job(client, job, {"Completed", "Failed"}, timeout=90)
        assert view["state"] == "Completed", view
        assert "after-outage" in client.logs(job)
