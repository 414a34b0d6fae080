"""Client commands people call in loops (``squeue -u $USER -h | wc -l``, ``scontrol show job``,
``sacct``) build only the client command table: they must not load the submission models,
the simulator or NumPy, which cost most of such a process's time (``fusesched.submit``'s
names load their module when first used)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PROBE = (
    "import sys; sys.argv = ['fusesched', *sys.argv[1:]]\n"
    "from fusesched.cli.entry import main\n"
    "try:\n    main()\nexcept SystemExit:\n    pass\n"
    "print(sorted(m for m in ('numpy', 'fusesched.submit.request', 'fusesched.core') "
    "if m in sys.modules), file=sys.stderr)"
)


@pytest.mark.parametrize(
    "args", [["squeue", "-h"], ["scontrol", "show", "job", "1"], ["sacct", "-X"], ["jobs"]]
)
def test_a_client_command_loads_no_heavy_module(args: list[str], tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *args, "--controller", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "USER": "ann"},
    )
    assert result.stderr.splitlines()[-1] == "[]", result.stderr
