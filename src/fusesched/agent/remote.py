"""``python -m fusesched.agent.remote HOST COMMAND...``: what ``mpirun`` calls instead of ssh.

OpenMPI starts its daemon on every other node of the allocation through a "remote shell
agent" (``plm_rsh_agent``); fusesched sets that to this module (see
:mod:`fusesched.controller.launchenv`). Like ssh, it runs ``COMMAND`` through ``/bin/sh -c`` on
``HOST`` — but by asking the controller to have HOST's agent start it as part of the job, so
no ssh daemon, keys or open ports are needed and the process is accounted to the job and
killed with it. It waits for the remote process and exits with its exit code. It
authenticates with the job's own credential (``FUSESCHED_JOB_TOKEN``, valid for this job
only, while it runs) and trusts ``FUSESCHED_CA`` when the controller speaks TLS. Called by
the mpirun of a job step (``srun`` of an MPI program: ``FUSESCHED_STEP_ID`` set), it names
that step, so the daemon is accounted to it (``fusesched sacct``'s ``ID.N`` rows).
"""

from __future__ import annotations

import os
import ssl
import sys
import time

import httpx

POLL_S = 0.1


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    while args and args[0].startswith("-"):  # ssh-style options (-x, -o ...) mean nothing here
        args.pop(0)
    if len(args) < 2:
        print("usage: python -m fusesched.agent.remote HOST COMMAND...", file=sys.stderr)
        return 2
    host, command = args[0], " ".join(args[1:])
    url = os.environ.get("FUSESCHED_CONTROLLER")
    job_id = os.environ.get("FUSESCHED_JOB_ID")
    if not url or not job_id:
        print(
            "fusesched remote launcher: FUSESCHED_CONTROLLER and FUSESCHED_JOB_ID must be set "
            "(it runs inside a fusesched job)",
            file=sys.stderr,
        )
        return 2
    token = os.environ.get("FUSESCHED_JOB_TOKEN")  # the job's own credential, when auth is on
    headers = {"authorization": f"Bearer {token}"} if token else {}
    ca = os.environ.get("FUSESCHED_CA")
    verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca) if ca else True
    with httpx.Client(
        base_url=url.rstrip("/"), timeout=30.0, headers=headers, verify=verify
    ) as http:
        launch: dict[str, object] = {"node": host, "argv": ["/bin/sh", "-c", command]}
        step = os.environ.get("FUSESCHED_STEP_ID", "")
        if step.isascii() and step.isdigit():
            launch["step"] = int(step)
        response = http.post(f"/v1/jobs/{job_id}/remote", json=launch)
        if response.status_code >= 400:
            print(f"fusesched remote launcher: {response.text}", file=sys.stderr)
            return 255  # what ssh returns when it cannot run the command
        task_id = response.json()["task_id"]
        while True:
            status = http.get(f"/v1/tasks/{task_id}")
            if status.status_code in (401, 404):
                return 0  # the job ended (its credential with it): its helpers ended with it
            if status.status_code >= 400:
                print(f"fusesched remote launcher: {status.text}", file=sys.stderr)
                return 255
            body = status.json()
            if body["state"] == "exited":
                code = body.get("exit_code")
                return int(code) if code is not None and code >= 0 else 255
            time.sleep(POLL_S)


if __name__ == "__main__":
    sys.exit(main())
