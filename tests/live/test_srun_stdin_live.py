"""``srun`` in a batch script forwards its standard input to the step's tasks, as Slurm's srun
does (agent/step_stdin.py), through a live controller and real agents on two nodes: to every
task, to one (``-i 0``), to none (``-i none``), a heredoc to ``python3 -``, a file on srun's
standard input, a file each task opens on its node (``-i in.%t``); what is too big, and a
file a task cannot open, are errors, the first with nothing started."""

from __future__ import annotations

from pathlib import Path

from fusesched.sdk import Client

SCRIPT = r"""#!/bin/bash
#SBATCH -N 2 --ntasks-per-node=1
#SBATCH --nodelist=node-a,node-b
#SBATCH -t 2
cd @S
echo x | srun -l cat
echo "all: $?"
echo y | srun -l -i 0 cat
echo "one: $?"
echo z | srun -l -i none cat
echo "none: $?"
srun -l cat
echo "script's own: $?"
srun -n1 python3 - one two <<'EOF'
import sys
print("heredoc", sys.argv[1:], sys.stdin.read() == "")
EOF
echo "heredoc: $?"
printf 'from a file\n' > in.txt
srun -l cat < in.txt
echo "redirected: $?"
printf 't0\n' > in.0
printf 't1\n' > in.1
srun -l -i 'in.%t' cat
echo "pattern: $?"
srun -n1 -i missing.txt cat
echo "missing: $?"
head -c 17M /dev/zero | srun -l cat
echo "too big: $?"
"""


def test_srun_forwards_its_stdin(client: Client, scratch: Path) -> None:
    script = SCRIPT.replace("@S", str(scratch))
    (job,) = client.submit_files([{"name": "stdin.sh", "text": script}])["ids"]
    done = client.wait(job, timeout=150)
    output = client.logs(job)
    assert done["state"] == "Completed", output
    lines = output.splitlines()
    labelled = sorted(line for line in lines if line[:1].isdigit() and ": " in line)
    assert labelled == [
        "0: from a file",
        "0: t0",
        "0: x",
        "0: y",
        "1: from a file",
        "1: t1",
        "1: x",
    ], output  # (-i 0: task 1 got nothing; -i none and the script's own: none got any)
    for said in ("all", "one", "none", "script's own", "heredoc", "redirected", "pattern"):
        assert f"{said}: 0" in lines, output
    assert "heredoc ['one', 'two'] True" in lines, output
    assert "srun: error: could not open input file missing.txt: No such file or directory" in (
        lines
    ), output
    assert "missing: 1" in lines, output
    assert "too big: 1" in lines, output
    assert any(
        line.startswith("srun: error: standard input is more than 16 MiB") for line in lines
    ), output
    assert "Traceback" not in output
    # every step started its tasks but the one too big (2 tasks each, one for -n1)
    remote = [t for t in done["tasks"] if ".remote." in t["task_id"]]
    assert len(remote) == 2 * 6 + 1 + 1, done["tasks"]
