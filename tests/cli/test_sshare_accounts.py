"""``fusesched sshare`` with Slurm's options and ``fusesched sacctmgr list user``: the accounts
a user may submit under, as tools check them (Snakemake's SLURM executor runs ``sacctmgr -n -s
list user NAME format=account%256``, then ``sshare -U --format Account%256 --noheader``),
against a real HTTP server that answers ``GET /v1/fairshare`` as told."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fusesched.cli import entry
from fusesched.cli.main import app
from fusesched.cli.slurm_commands import NAMES

from .conftest import Script

runner = CliRunner()


def _row(account: str, shares: float, norm: float, usage: float, **extra: float) -> dict:
    return {
        "account": account,
        "depth": account.count("/") + 1,
        "shares": shares,
        "norm_shares": norm,
        "usage": usage,
        "norm_usage": 0.25,
    } | extra


#: A tenancy configuration's tree: tenants physics (queue small: alice, bob) and biology.
TREE = [
    _row("lab", 1, 1.0, 9000),
    _row("lab/physics", 1, 0.5, 7200),
    _row("lab/physics/small", 1, 1.0, 7200),
    _row("lab/physics/small/alice", 2, 0.666667, 3600, level_fs=2.0, factor=0.5),
    _row("lab/physics/small/bob", 1, 0.333333, 3600, level_fs=1.0, factor=1.0),
    _row("lab/biology", 1, 0.5, 1800),
    _row("lab/biology/big", 1, 1.0, 1800),
]


@pytest.fixture(autouse=True)
def alice(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LOGNAME", "USER"):
        monkeypatch.setenv(name, "alice")


def _run(url: str, script: Script, answer: list[dict], *args: str) -> tuple[int, str]:
    script.body = json.dumps(answer).encode()
    done = runner.invoke(app, [*args, "--controller", url], prog_name="fusesched")
    return done.exit_code, done.output


def test_without_a_tenancy_configuration_the_account_is_default(
    server: tuple[str, Script],
) -> None:
    url, script = server
    code, out = _run(url, script, [], "sshare", "-U", "--format", "Account%256", "--noheader")
    assert code == 0, out
    assert [line.strip() for line in out.splitlines()] == ["default"]
    assert len(out.splitlines()[0]) == 257  # (padded to the width asked, then a space)
    assert script.received[-1]["path"] == "/v1/fairshare"
    code, out = _run(url, script, [], "sshare", "-u", "bob", "-P", "-o", "Account,User")
    assert (code, out) == (0, "Account|User\ndefault|bob\n")
    code, out = _run(url, script, [], "sshare", "-A", "physics", "-n")
    assert (code, out) == (0, "")  # (an account that is not there: no rows, as Slurm's)


def test_slurms_fixed_columns(server: tuple[str, Script]) -> None:
    url, script = server
    code, out = _run(url, script, [], "sshare", "-U")
    assert code == 0, out
    header, dashes, row = out.splitlines()
    # (as Slurm's sshare prints them, each column followed by a space)
    assert header == (
        "Account                    User  RawShares  NormShares    RawUsage  EffectvUsage"
        "  FairShare "
    )
    assert dashes == "-" * 20 + " " + " ".join("-" * w for w in (10, 10, 11, 11, 13, 10)) + " "
    assert row.split() == ["default", "alice"]


def test_with_a_tree_the_callers_own_associations_are_its_tenants_and_default(
    server: tuple[str, Script],
) -> None:
    url, script = server
    code, out = _run(url, script, TREE, "sshare", "-U", "--format", "Account%256", "--noheader")
    assert code == 0, out
    assert [line.strip() for line in out.splitlines()] == ["physics", "default"]
    fields = "Account,User,Partition,RawShares,RawUsage,LevelFS,FairShare"
    code, out = _run(url, script, TREE, "sshare", "-U", "-P", "-o", fields)
    assert out.splitlines() == [
        "Account|User|Partition|RawShares|RawUsage|LevelFS|FairShare",
        "physics|alice|small|2|3600|2.000000|0.500000",
        "default|alice|||||",
    ]


def test_users_and_accounts_filters_and_the_tree_indented(server: tuple[str, Script]) -> None:
    url, script = server
    code, out = _run(url, script, TREE, "sshare", "-u", "bob", "-A", "physics", "-p", "-n")
    assert code == 0, out
    assert out.splitlines() == [
        "physics||1|0.500000|7200|0.250000||",
        "physics||1|1.000000|7200|0.250000||",
        "physics|bob|1|0.333333|3600|0.250000|1.000000|",
    ]
    code, out = _run(url, script, TREE, "sshare", "-o", "Account,User", "-n")
    accounts = [line[:20] for line in out.splitlines()]
    tree = ["lab", " physics", "  physics", "   physics"]  # (organisation, tenant, queue, alice)
    assert accounts[:4] == [name.ljust(20) for name in tree]
    assert out.splitlines()[-1].split() == ["default", "alice"]


def test_bad_slurm_options_are_refused_and_the_tree_is_kept_without_them(
    server: tuple[str, Script],
) -> None:
    url, script = server
    code, out = _run(url, script, TREE, "sshare", "-o", "Account,Acct")
    assert code == 2 and "unknown field 'Acct'" in out
    code, out = _run(url, script, TREE, "sshare", "-o", "Account%wide")
    assert code == 2 and "the width after % is a number" in out
    code, out = _run(url, script, TREE, "share", "-U", "--json")
    assert code == 2 and "leave out --json" in out
    code, out = _run(url, script, [], "share")  # (share's own output, unchanged)
    assert code == 0 and "no fair share: the controller runs without a tenancy" in out
    code, out = _run(url, script, TREE, "share")
    assert code == 0 and "raw shares" in out and "Account" not in out


def test_sacctmgr_lists_a_users_accounts(server: tuple[str, Script]) -> None:
    url, script = server
    line = ["sacctmgr", "-n", "-s", "list", "user", "alice", "format=account%256"]
    code, out = _run(url, script, [], *line)
    assert code == 0, out
    assert [x.strip() for x in out.splitlines()] == ["default"]
    code, out = _run(url, script, TREE, *line)
    assert [x.strip() for x in out.splitlines()] == ["physics", "default"]
    code, out = _run(url, script, TREE, "sacctmgr", "-P", "show", "users", "withassoc")
    assert out.splitlines() == [
        "User|Def Acct|Account|Partition",
        "alice|default|physics|small",
        "alice|default|default|",
        "bob|default|physics|small",
        "bob|default|default|",
    ]
    code, out = _run(url, script, TREE, "sacctmgr", "list", "user", "where", "name=bob")
    assert out.splitlines()[2].split() == ["bob", "default"]


@pytest.mark.parametrize(
    ("words", "said"),
    [
        (["add", "account", "x"], "not `sacctmgr add account x`"),
        (["list", "account"], "fusesched lists users only"),
        (["list", "user", "cluster=c"], "cluster= is not answered"),
        (["list", "user", "format=qos"], "unknown field 'qos'"),
    ],
)
def test_sacctmgr_refuses_what_it_does_not_answer(
    server: tuple[str, Script], words: list[str], said: str
) -> None:
    url, script = server
    code, out = _run(url, script, [], "sacctmgr", *words)
    assert code == 1 and said in out, out
    assert not script.received


def test_snakemakes_account_check_through_the_installed_scripts(
    server: tuple[str, Script], tmp_path: Path
) -> None:
    """The two command lines the executor runs, as it runs them: each must succeed (its
    ``sacctmgr`` first: a missing one is an error it does not catch) and name the account."""
    url, script = server
    script.body = json.dumps(TREE).encode()
    assert "sacctmgr" in NAMES and "sacctmgr" in entry.CLIENT_COMMANDS
    folder = tmp_path / "bin"
    install = [sys.executable, "-m", "fusesched", "slurm-commands", "install", str(folder)]
    assert subprocess.run(install, capture_output=True, timeout=60, check=False).returncode == 0
    env = {"PATH": f"{folder}:/usr/bin:/bin", "HOME": str(tmp_path), "USER": "alice"}
    for line in (
        ["sacctmgr", "-n", "-s", "list", "user", "alice", "format=account%256"],
        ["sshare", "-U", "--format", "Account%256", "--noheader"],
    ):
        done = subprocess.run(
            line,
            capture_output=True,
            text=True,
            timeout=60,
            env=env | {"FUSESCHED_CONTROLLER": url},
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert {x.strip().lower() for x in done.stdout.splitlines()} == {"physics", "default"}


def test_a_width_justifies_as_slurms(server: tuple[str, Script]) -> None:
    """Slurm's sshare: ``%N`` right-justifies, ``%-N`` left-justifies, ``%0`` is the field's
    own width; a width it cannot print is refused, not a traceback."""
    url, script = server
    code, out = _run(url, script, [], "sshare", "-U", "-o", "Account%12,User%-8")
    assert code == 0, out
    assert out.splitlines()[0] == "     Account User     "
    assert out.splitlines()[2] == "     default alice    "
    code, out = _run(url, script, [], "sshare", "-U", "-o", "Account%0,User%0", "-n")
    assert (code, out.splitlines()) == (0, ["default" + " " * 13 + "      alice "])
    for bad in ("Account%99999999999999999999", "Account%--5", "Account%²"):
        code, out = _run(url, script, [], "sshare", "-o", bad)
        assert code == 2 and "the width after %" in out, out


def test_users_are_yours_unless_named_or_all(server: tuple[str, Script]) -> None:
    """Slurm's sshare shows the caller's user associations unless ``-u`` names others or
    ``-a`` asks for all; ``-U`` leaves out the accounts above them."""
    url, script = server
    code, out = _run(url, script, TREE, "sshare", "-U", "-u", "bob", "-P", "-o", "Account,User")
    assert (code, out.splitlines()) == (0, ["Account|User", "physics|bob", "default|bob"])
    code, out = _run(url, script, TREE, "sshare", "-P", "-n", "-o", "Account,User")
    assert code == 0 and [x for x in out.splitlines() if x.endswith("|bob")] == [], out
    assert "physics|alice" in out.splitlines() and "lab|" in out.splitlines()
    code, out = _run(url, script, TREE, "sshare", "-a", "-U", "-P", "-n", "-o", "Account,User")
    assert code == 0 and out.splitlines() == [
        "physics|alice",
        "physics|bob",
        "default|alice",
        "default|bob",
    ], out
    code, out = _run(url, script, TREE, "sshare", "-U", "-u", "bob,bob", "-P", "-n", "-o", "User")
    assert (code, out.splitlines()) == (0, ["bob", "bob"])  # (physics, default: each once)


def test_sacctmgr_names_a_user_once(server: tuple[str, Script]) -> None:
    url, script = server
    code, out = _run(url, script, TREE, "sacctmgr", "-n", "-P", "list", "user", "bob", "name=bob")
    assert (code, out) == (0, "bob|default\n")
