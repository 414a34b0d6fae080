"""Job event notifications end to end: a real controller and agent, batch scripts with
``--mail-type``/``--mail-user`` parsed by the controller, mails received by a real SMTP server
(aiosmtpd) and JSON by a real HTTP server on the loopback; a mail server that is down costs
the jobs nothing and is counted in /metrics."""

from __future__ import annotations

import getpass
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from tests.live.conftest import local_cluster
from tests.mailservers import closed_port, hook_server, smtp_server

from fusesched.cli.local import LocalCluster
from fusesched.controller.notify_send import NotifyConfig
from fusesched.sdk import Client

SCRIPT = "#!/bin/sh\n{body}\n"
FUSESCHED = (sys.executable, "-m", "fusesched")


@contextmanager
def notifying_cluster(data: Path, notify: NotifyConfig) -> Iterator[LocalCluster]:
    """A controller with ``notify`` and one real agent (node-a, 2 CPUs)."""
    with local_cluster(data, lambda configs: configs[:1], notify=notify) as cluster:
        yield cluster


def _sbatch(client: Client, body: str, *args: str) -> str:
    """Submit a batch script with sbatch options, parsed by the controller."""
    files = [{"name": "job.sh", "text": SCRIPT.format(body=body), "args": list(args)}]
    (job_id,) = client.submit_files(files)["ids"]
    return str(job_id)


def test_mails_and_webhook_for_begin_end_fail_and_time_limit(tmp_path: Path) -> None:
    with smtp_server() as (box, port), hook_server() as (hooks, url):
        notify = NotifyConfig(
            smtp=f"127.0.0.1:{port}",
            mail_from="hpc@example.org",
            mail_domain="example.org",
            webhook=url,
            check_s=0.2,
            backoff_s=0.1,
        )
        with notifying_cluster(tmp_path / "data", notify) as cluster:
            client = Client(cluster.url)
            ok = _sbatch(
                client,
                "sleep 0.5",
                "-J",
                "train",
                "--mail-type=BEGIN,END",
                "--mail-user=a@example.org",
            )
            shown = client.wait(ok, timeout=60)
            assert shown["state"] == "Completed"
            assert (shown["mail_type"], shown["mail_user"]) == ("BEGIN,END", "a@example.org")
            began, ended = box.wait(2)
            assert re.fullmatch(
                rf"fusesched Job_id={ok} Name=train Began, Queued time 00:00:0\d",
                str(began["Subject"]),
            )
            assert re.fullmatch(
                rf"fusesched Job_id={ok} Name=train Ended, Run time 00:00:0\d, COMPLETED, "
                "ExitCode 0",
                str(ended["Subject"]),
            )
            assert box.recipients == [["a@example.org"], ["a@example.org"]]
            assert str(ended["From"]) == "hpc@example.org"
            assert "Nodes=node-a" in ended.get_content()
            posts = hooks.wait(2)
            assert [(p["event"], p["job_id"], p["state"]) for p in posts] == [
                ("begin", ok, "RUNNING"),
                ("end", ok, "COMPLETED"),
            ]
            assert posts[1]["exit_code"] == 0 and posts[1]["run_time_s"] >= 0.5

            failing = _sbatch(client, "exit 3", "-J", "broken", "--mail-type=FAIL")
            assert client.wait(failing, timeout=60)["state"] == "Failed"
            mail = box.wait(3)[2]
            assert re.fullmatch(
                rf"fusesched Job_id={failing} Name=broken Failed, Run time 00:00:0\d, FAILED, "
                "ExitCode 3",
                str(mail["Subject"]),
            )
            # to the submitting user, qualified with the default domain
            assert box.recipients[2] == [f"{getpass.getuser()}@example.org"]

            timed = _sbatch(
                client, "sleep 3", "-J", "slow", "-t", "0:04", "--mail-type=TIME_LIMIT_50"
            )
            assert client.wait(timed, timeout=60)["state"] == "Completed"
            mail = box.wait(4)[3]
            assert re.fullmatch(
                rf"fusesched Job_id={timed} Name=slow Reached 50% of time limit, Run time "
                r"00:00:0[23]",
                str(mail["Subject"]),
            )
            time.sleep(0.5)
            assert len(box.subjects()) == 4  # nothing for the untold events
            metrics = httpx.get(f"{cluster.url}/metrics").text
            assert 'fusesched_notifications_sent_total{transport="smtp"} 4.0' in metrics
            assert 'fusesched_notifications_sent_total{transport="webhook"} 4.0' in metrics


def test_a_mail_server_that_is_down_costs_the_job_nothing(tmp_path: Path) -> None:
    with closed_port() as port:
        notify = NotifyConfig(smtp=f"127.0.0.1:{port}", attempts=2, backoff_s=0.05, timeout_s=2)
        with notifying_cluster(tmp_path / "data", notify) as cluster:
            client = Client(cluster.url)
            job = _sbatch(client, "true", "--mail-type=BEGIN,END", "--mail-user=a@example.org")
            assert client.wait(job, timeout=60)["state"] == "Completed"
            failures = 'fusesched_notification_failures_total{transport="smtp"} 2.0'
            deadline = time.monotonic() + 15
            metrics = ""
            while time.monotonic() < deadline:
                metrics = httpx.get(f"{cluster.url}/metrics").text
                if failures in metrics:
                    break
                time.sleep(0.1)
            assert failures in metrics, [m for m in metrics.splitlines() if "notif" in m]
            assert 'fusesched_notifications_sent_total{transport="smtp"} 0.0' in metrics
            # the controller goes on scheduling
            after = client.submit({"groups": [{"resources": {"cpu": 1}, "argv": ["true"]}]})
            assert client.wait(after, timeout=60)["state"] == "Completed"


def test_fusesched_up_takes_the_mail_options(scratch: Path) -> None:
    """The one-command cluster mails too: `fusesched up --smtp HOST:PORT` (a real process),
    a job submitted with `sbatch --mail-type=END`, its mail at the real SMTP server."""
    with smtp_server() as (box, port):
        up = subprocess.Popen(
            [
                *FUSESCHED,
                "up",
                "--port",
                "0",
                "--data-dir",
                "data",
                "--smtp",
                f"127.0.0.1:{port}",
                "--mail-from",
                "cluster@example.org",
            ],
            cwd=scratch,  # tasks run as other users: their folders must be reachable
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert up.stderr is not None
            line = up.stderr.readline()
            found = re.search(r"up at (\S+)", line)
            assert found, line
            url = found.group(1).replace("\x1b[0m", "").replace("\x1b[1m", "")
            sent = subprocess.run(
                [
                    *FUSESCHED,
                    "sbatch",
                    "--parsable",
                    "--wait",
                    "--mail-type=END",
                    "--mail-user=a@example.org",
                    "--wrap=true",
                ],
                env={**os.environ, "FUSESCHED_CONTROLLER": url},
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert sent.returncode == 0, sent.stderr
            job_id = sent.stdout.strip()
            [mail] = box.wait(1)
            assert mail["To"] == "a@example.org" and mail["From"] == "cluster@example.org"
            assert f"Job_id={job_id} " in mail["Subject"] and "COMPLETED" in mail["Subject"]
            shown = subprocess.run(
                [*FUSESCHED, "show", job_id],
                env={**os.environ, "FUSESCHED_CONTROLLER": url, "COLUMNS": "200"},
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert "mail: END to a@example.org" in shown.stdout, shown
        finally:
            up.terminate()
            up.wait(timeout=30)


def test_fusesched_up_refuses_mail_options_without_a_server(tmp_path: Path) -> None:
    done = subprocess.run(
        [*FUSESCHED, "up", "--port", "0", "--mail-from", "x@y.org"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "--mail-from needs --smtp" in done.stderr, done.stderr
