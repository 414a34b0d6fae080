"""Which uid a task runs under, and the reachability checks made before it starts."""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from pathlib import Path

import pytest

from fusesched.agent.users import (
    UID_COUNT,
    UID_MIN,
    Identity,
    IdentityError,
    check_reachable,
    derived_uid,
    resolve,
)


def test_users_without_an_account_get_a_stable_uid_in_the_reserved_range() -> None:
    who = resolve("alice-no-such-account")
    assert UID_MIN <= who.uid < UID_MIN + UID_COUNT
    assert who == resolve("alice-no-such-account")  # the same on every node
    assert who.uid != resolve("bob-no-such-account").uid


def test_root_and_anonymous_never_run_as_root() -> None:
    assert resolve("root").uid == derived_uid("root") != 0
    assert resolve("").name == "anonymous"
    assert resolve("").uid == derived_uid("anonymous")


def test_the_map_wins_and_cannot_grant_root() -> None:
    assert resolve("carol", uid_map={"carol": 5000}) == Identity("carol", 5000, 5000)
    with pytest.raises(IdentityError, match="tasks never run as root"):
        resolve("mallory", uid_map={"mallory": 0})


def test_existing_accounts_are_used() -> None:
    account = next((p for p in pwd.getpwall() if p.pw_uid != 0), None)
    if account is None:
        pytest.skip("no unprivileged account on this machine")
    assert resolve(account.pw_name) == Identity(account.pw_name, account.pw_uid, account.pw_gid)


def test_reachability_names_the_folder_that_blocks() -> None:
    base = Path(tempfile.mkdtemp(prefix="fusesched-users-"))  # pytest's tmp_path is private
    base.chmod(0o755)
    try:
        _check_blocking_folder(base)
    finally:
        shutil.rmtree(base)


def _check_blocking_folder(base: Path) -> None:
    private = base / "private"
    inner = private / "task"
    inner.mkdir(parents=True)
    private.chmod(0o700)
    who = Identity("x", 123456, 123456)
    if os.stat(private).st_uid == who.uid:  # pragma: no cover - not on this machine
        pytest.skip("unexpected owner")
    with pytest.raises(IdentityError, match=r"private is not searchable by it \(mode drwx------\)"):
        check_reachable(inner, who)
    private.chmod(0o711)
    for parent in base.parents:
        if not os.stat(parent).st_mode & 0o001:
            pytest.skip(f"{parent} is not searchable by others on this machine")
    check_reachable(inner, who)
    script = inner / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o700)
    with pytest.raises(IdentityError, match="not executable by x"):
        check_reachable(script, who, execute=True)
    script.chmod(0o755)
    check_reachable(script, who, execute=True)
