"""A job's own ``scontrol`` under authentication: ``show job``, ``requeue``… go to the
controller with the user's token (``FUSESCHED_TOKEN``, else the token file), not the job's
own credential, which a batch script has too and which may only start the job's steps."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from fusesched.sdk import Client

from .conftest import local_cluster


def test_scontrol_in_a_batch_script_sends_the_users_token(tmp_path: Path) -> None:
    folder = Path(tempfile.mkdtemp(prefix="fusesched-scontrol-"))
    folder.chmod(0o1777)  # (the job runs under an unprivileged uid)
    try:
        with local_cluster(tmp_path / "data", lambda agents: agents[:1], auth=True) as cluster:
            admin = Client(cluster.url, token=cluster.admin_token)
            token = admin.create_token("ann", tenant="lab", role="user")["token"]
            config = folder / "config" / "fusesched"
            config.mkdir(parents=True)
            (config / "token").write_text(token + "\n")
            for path in (config.parent, config, config / "token"):
                path.chmod(0o755 if path.is_dir() else 0o644)
            script = folder / "job.sh"
            script.write_text(
                "#!/bin/sh\n"
                f"export XDG_CONFIG_HOME={folder / 'config'}\n"
                'scontrol show job "$SLURM_JOB_ID" | head -n 1\n'
            )
            out = folder / "out.txt"
            env = {
                **os.environ,
                "FUSESCHED_CONTROLLER": cluster.url,
                "FUSESCHED_TOKEN": token,
            }
            sbatch = [sys.executable, "-m", "fusesched", "sbatch", "--parsable", "-W"]
            ran = subprocess.run(
                [*sbatch, "--mem=64M", "-t", "2", "-o", str(out), str(script)],
                capture_output=True,
                text=True,
                timeout=60,
                env=env,
                check=False,
            )
            assert ran.returncode == 0, ran.stderr
            job = ran.stdout.strip()
            assert out.read_text().startswith(f"JobId={job} JobName=job.sh\n"), out.read_text()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
