"""Job-record retention with a real ``fusesched up`` (docs/DEPLOY.md, "Retention"): two jobs
run; ``fusesched purge`` refuses a cutoff fair share still needs, then, forced, removes the
older job (its record, its log folder) and keeps the newer one; the controller restarts on the
purged store and runs jobs, and its fair share after the restart has the kept job's usage and
none of the purged one's. A ``--purge-after`` shorter than fair share's window is refused at
startup."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fusesched.sdk import Client

from .test_direct_link import free_port, until

FUSESCHED = [sys.executable, "-m", "fusesched"]
HALF_LIFE_S = 3600.0  # fair share's window: 20 hours


def tenancy() -> dict[str, Any]:
    """Tenants ml (queue train) and phys (queue sim), 2 CPUs of quota each; a one-hour
    half-life."""
    flavour = {"name": "any", "resources": {"cpu": {"nominal": 2}}}
    tenants = [
        {"name": name, "queues": [{"name": queue, "flavors": [flavour]}]}
        for name, queue in (("ml", "train"), ("phys", "sim"))
    ]
    return {
        "flavors": [{"name": "any", "resources": ["cpu"]}],
        "organisations": [{"name": "lab", "tenants": tenants}],
        "scheduling": {"half_life_s": HALF_LIFE_S, "recalc_s": 1.0},
    }


class Up:
    """``fusesched up`` in a process of its own, on ``data``."""

    def __init__(self, data: Path, tenancy_file: Path, *extra: str) -> None:
        self.data, self.tenancy_file, self.extra = data, tenancy_file, extra
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self) -> Client:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [
                *FUSESCHED,
                "up",
                "--data-dir",
                str(self.data),
                "--port",
                str(port),
                "--tenancy",
                str(self.tenancy_file),
                "--queue-order",
                "multifactor",
                *self.extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        client = Client(self.url)
        proc = self.proc

        def ready() -> bool:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else "exited"
            try:
                return any(n["state"] == "up" for n in client.nodes())
            except Exception:
                return False

        until(ready, 60, "fusesched up never came up")
        return client

    def stop(self) -> str:
        """Stop it as Ctrl-C does; what it said on stderr."""
        proc = self.proc
        if proc is None:
            return ""
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=30)
            assert proc.returncode == 0, err
            return err
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            self.proc = None

    def cli(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, FUSESCHED_CONTROLLER=self.url, COLUMNS="200")
        return subprocess.run(
            [*FUSESCHED, *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            input=stdin,
        )


@pytest.fixture
def data() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="fusesched-purge-"))
    folder.chmod(0o755)  # (tasks run under unprivileged uids)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def run(client: Client, name: str, tenant: str, queue: str) -> dict[str, Any]:
    """A one-CPU job that runs a second and says its name; its record once ended."""
    body = {
        "name": name,
        "tenant": tenant,
        "queue": queue,
        "walltime_s": 120,
        "groups": [
            {
                "resources": {"cpu": "1", "memory": "32Mi"},
                "argv": ["sh", "-c", f"sleep 1; echo {name}"],
            }
        ],
    }
    job_id = client.submit(body)
    shown = client.wait(job_id, timeout=60)
    assert shown["state"] == "Completed", shown
    return dict(shown)


def usage(client: Client, tenant: str) -> float:
    """The decayed usage of ``tenant``'s account (sshare's), 0 when it has none."""
    rows = client.fairshare()
    found = [r["usage"] for r in rows if r["account"].split("/")[1:2] == [tenant]]
    return float(max(found, default=0.0))


def test_purge_removes_old_jobs_and_the_controller_restarts_on_what_is_left(
    data: Path, tmp_path: Path
) -> None:
    tenancy_file = tmp_path / "tenancy.yaml"
    tenancy_file.write_text(yaml.safe_dump(tenancy()))
    # retention on (never into fair share's 20 hours: 40 hours is allowed)
    up = Up(data / "d", tenancy_file, "--purge-after", "40h")
    try:
        client = up.start()
        old = run(client, "old", "ml", "train")
        time.sleep(1.5)
        cutoff = time.time()
        time.sleep(0.5)
        kept = run(client, "kept", "phys", "sim")
        assert old["end_time"] < cutoff < kept["end_time"]
        logs = data / "d" / "logs"
        assert (logs / old["id"]).is_dir() and (logs / kept["id"]).is_dir()
        before = {tenant: usage(client, tenant) for tenant in ("ml", "phys")}
        assert before["ml"] > 0 and before["phys"] > 0

        # inside fair share's window: refused, and nothing goes
        refused = up.cli("purge", "--before", str(cutoff), "--yes")
        assert refused.returncode == 2
        assert "would erase usage fair share still counts" in refused.stderr
        assert "Traceback" not in refused.stderr
        # forced: asked first (no), then yes
        dry = up.cli("purge", "--before", str(cutoff), "--force", "--dry-run", "--json")
        assert dry.returncode == 0, dry.stderr
        assert json.loads(dry.stdout)["jobs"] == 1
        declined = up.cli("purge", "--before", str(cutoff), "--force", stdin="n\n")
        assert declined.returncode == 1 and "nothing was purged" in declined.stderr
        assert client.show(old["id"])["state"] == "Completed"
        done = up.cli("purge", "--before", str(cutoff), "--force", stdin="y\n")
        assert done.returncode == 0, done.stderr
        assert "removed 1 job, 1 task" in done.stdout
        gone = up.cli("show", old["id"])
        assert gone.returncode != 0 and old["id"] in gone.stderr
        assert not (logs / old["id"]).exists() and (logs / kept["id"]).is_dir()
        assert client.show(kept["id"])["state"] == "Completed"
        listed = json.loads(up.cli("sacct", "-a", "-S", "now-1hour", "--json").stdout or "[]")
        accounted = {row["JobID"].split(".")[0] for row in listed}
        assert kept["id"] in accounted and old["id"] not in accounted
        up.stop()

        # the restart: the store as the purge left it, fair share from the kept job alone
        client = up.start()
        after = {tenant: usage(client, tenant) for tenant in ("ml", "phys")}
        assert after["ml"] == 0.0  # the purged run's usage is forgotten, as documented
        assert after["phys"] == pytest.approx(before["phys"], rel=0.05)
        assert client.show(kept["id"])["state"] == "Completed"
        later = run(client, "later", "ml", "train")
        assert client.logs(later["id"]).strip() == "later"
    finally:
        up.stop()


def test_a_purge_after_shorter_than_fair_shares_window_is_refused(tmp_path: Path) -> None:
    tenancy_file = tmp_path / "tenancy.yaml"
    tenancy_file.write_text(yaml.safe_dump(tenancy()))
    done = subprocess.run(
        [
            *FUSESCHED,
            "up",
            "--data-dir",
            str(tmp_path / "d"),
            "--port",
            str(free_port()),
            "--tenancy",
            str(tenancy_file),
            "--purge-after",
            "2h",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    said = " ".join(done.stderr.split())
    assert "--purge-after 2h is shorter than the usage fair share reads back" in said
    assert "Traceback" not in done.stderr
