"""What the benchmarks print about the machine and the code they measured."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

import fusesched

ROOT = Path(__file__).resolve().parents[1]


def machine() -> dict[str, Any]:
    """CPU model, core counts, versions, and a digest of the source tree that was measured."""
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    digest = hashlib.sha256()
    src = ROOT / "src" / "fusesched"
    for path in sorted(src.rglob("*.py")):
        digest.update(str(path.relative_to(src)).encode())
        digest.update(path.read_bytes())
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        head = "unknown"
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "fusesched": fusesched.__version__,
        "git": head,
        "src_sha256": digest.hexdigest()[:16],
        "loadavg_at_start": os.getloadavg()[0],
    }


def describe(info: dict[str, Any], markup: bool = True) -> str:
    """The one-line machine description every benchmark prints first (Rich markup, or plain
    text for a report with ``markup=False``)."""
    label = "[bold]machine[/]" if markup else "machine"
    return (
        f"{label}: {info['cpu']}, {info['cores']} cores "
        f"({info['usable_cores']} usable), Python {info['python']}, NumPy {info['numpy']}, "
        f"fusesched {info['fusesched']} (git {info['git']}, src sha256 {info['src_sha256']}), "
        f"load average {info['loadavg_at_start']:.2f}"
    )
