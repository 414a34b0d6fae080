"""``srun`` in a batch script forwards its standard input to the step's tasks, as Slurm's srun
does (agent/step_stdin.py), through a live controller and real agents on two nodes: to every
task, to one (``-i 0``), to none (``-i none``), a heredoc to ``python3 -``, a file on srun's
standard input, a file each task opens on its node (``-i in.%t``); a file a task cannot open
is an error. An input that has not ended when the step starts is streamed (agent/
stdin_forward.py, controller/stdin_streams.py, fusesched/stdin_pump.py): its lines reach the
tasks on both nodes as they come, one that is never closed holds no task up (Snakemake's
jobstep plugin's ``Popen(..., stdin=PIPE)``, then ``wait()``), and one bigger than a step
request can carry goes through whole."""

from __future__ import annotations

from pathlib import Path

from fusesched.sdk import Client

from .conftest import local_cluster

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
head -c 17M /dev/zero | srun -l wc -c
echo "big: $?"
start=$SECONDS
timeout 60 python3 -c "import subprocess; p = subprocess.Popen(['srun', '-n1', 'true'], \
stdin=subprocess.PIPE); print('popen', p.wait())"
echo "never closed: $? in $((SECONDS - start))s"
(echo a; sleep 3; echo b) | srun -n1 cat
echo "a then b: $?"
(echo c; for i in $(seq 150); do [ -e got-c ] && break; sleep 0.1; done
 if [ -e got-c ]; then echo d; else echo late; fi) | srun -n1 python3 -u -c "
import pathlib, sys
for line in sys.stdin:
    print('got', line.strip())
    if line.strip() == 'c':
        pathlib.Path('got-c').touch()
"
echo "as it comes: $?"
(echo s1; sleep 1; echo s2) | srun -l cat
echo "streamed: $?"
(sleep 1; echo w) | srun -l -i 1 cat
echo "streamed to one: $?"
"""


def test_srun_forwards_its_stdin(client: Client, scratch: Path) -> None:
    script = SCRIPT.replace("@S", str(scratch))
    (job,) = client.submit_files([{"name": "stdin.sh", "text": script}])["ids"]
    done = client.wait(job, timeout=170)
    output = client.logs(job)
    assert done["state"] == "Completed", output
    lines = output.splitlines()
    labelled = sorted(line for line in lines if line[:1].isdigit() and ": " in line)
    assert labelled == [
        "0: 17825792",
        "0: from a file",
        "0: s1",
        "0: s2",
        "0: t0",
        "0: x",
        "0: y",
        "1: 17825792",
        "1: from a file",
        "1: s1",
        "1: s2",
        "1: t1",
        "1: w",
        "1: x",
    ], output  # (-i 0: task 1 got nothing; -i none and the script's own: none got any)
    for said in ("all", "one", "none", "script's own", "heredoc", "redirected", "pattern"):
        assert f"{said}: 0" in lines, output
    for said in ("big", "a then b", "as it comes", "streamed", "streamed to one"):
        assert f"{said}: 0" in lines, output
    # a standard input never closed: the step ran and srun ended with it, at once
    assert "popen 0" in lines, output
    (took,) = [line for line in lines if line.startswith("never closed: ")]
    assert took.startswith("never closed: 0 in ") and int(took[19:-1]) < 20, output
    assert lines.index("a") < lines.index("b") < lines.index("a then b: 0"), output
    # each line reached the task as it came: d was written only once the task had read c
    assert [line for line in lines if line.startswith("got ")] == ["got c", "got d"], output
    assert "heredoc ['one', 'two'] True" in lines, output
    assert "srun: error: could not open input file missing.txt: No such file or directory" in (
        lines
    ), output
    assert "missing: 1" in lines, output
    assert "Traceback" not in output and "srun: warning" not in output, output
    # every step started its tasks (2 tasks each, one for -n1)
    remote = [t for t in done["tasks"] if ".remote." in t["task_id"]]
    assert len(remote) == 2 * 9 + 5, done["tasks"]


SECURE_SCRIPT = r"""#!/bin/bash
#SBATCH -N 2 --ntasks-per-node=1
#SBATCH --nodelist=node-a,node-b
#SBATCH -t 2
(echo a; sleep 1; echo b) | srun -l cat
echo "streamed: $?"
"""


def test_the_tasks_read_it_with_the_jobs_own_credential(tmp_path: Path) -> None:
    """With authentication on, srun and each task's reader reach the stream with the job's
    own credential, on both nodes."""
    with local_cluster(tmp_path / "data", pick=lambda c: c[:2], auth=True) as cluster:
        assert cluster.admin_token is not None
        client = Client(cluster.url, token=cluster.admin_token)
        (job,) = client.submit_files([{"name": "stdin.sh", "text": SECURE_SCRIPT}])["ids"]
        done = client.wait(job, timeout=90)
        output = client.logs(job)
    assert done["state"] == "Completed", output
    lines = output.splitlines()
    assert sorted(line for line in lines if line[:1].isdigit()) == ["0: a", "0: b", "1: a", "1: b"]
    assert "streamed: 0" in lines and "srun: warning" not in output, output
