"""Fixtures for the agent tests: a runtime in a temporary folder and a tiny container image."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from fusesched.agent.containers import Bind
from fusesched.agent.images import ImageCache
from fusesched.agent.runtime import ProcessRuntime

HOST_USR = Path("/usr")


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder outside pytest's own (which are private to root), reachable by task users."""
    folder = Path(tempfile.mkdtemp(prefix="fusesched-agent-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[ProcessRuntime]:
    rt = ProcessRuntime(tmp_path / "work", ImageCache(tmp_path / "images"))
    yield rt
    rt.shutdown(grace_s=0.2)


def make_rootfs(root: Path) -> Path:
    """An image that is empty but for a marker file, mount points and merged-/usr symlinks.

    Its ``/usr`` is an empty mount point: the tests bind the host's ``/usr`` there read-only,
    which gives the container a shell and coreutils without copying anything.
    """
    for name in ("usr", "etc", "tmp", "proc", "dev", "data"):
        (root / name).mkdir(parents=True, exist_ok=True)
    for name in ("bin", "sbin", "lib", "lib64"):
        if (HOST_USR / name).exists() and not (root / name).is_symlink():
            os.symlink(f"usr/{name}", root / name)
    (root / "etc" / "image-marker").write_text("from the image\n")
    return root


@pytest.fixture
def container_runtime(tmp_path: Path) -> Iterator[ProcessRuntime]:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed; scripts/system_deps.sh installs it")
    rt = ProcessRuntime(
        tmp_path / "work",
        ImageCache(tmp_path / "images"),
        binds=[Bind(HOST_USR, "/usr")],
    )
    yield rt
    rt.shutdown(grace_s=0.2)
