"""``fusesched sinfo -O`` (sinfo's long field names) and ``-i`` (a listing every N seconds
under the time, until Ctrl-C), pure: the names as the ``-o`` letters' fields, their widths,
the refusals, and the loop with its clock and sleep stood in for."""

from __future__ import annotations

import time

import pytest
import typer
from tests.cli.test_sinfo_format import info

from fusesched.cli import sinfo_format as si
from fusesched.cli import sinfo_long as sl
from fusesched.cli.sinfo import every
from fusesched.cli.squeue_format import FormatError
from fusesched.sdk import ControllerError


def test_every_name_is_the_field_of_its_letter() -> None:
    for name, letter in sl.LONG_FIELDS.items():
        (piece,) = sl.parse(name.upper())
        assert piece.field is si.FIELDS[letter]


def test_widths_and_lines() -> None:
    nodes = [info("n1"), info("n2"), info("g1", "drained", pool="gpu", drain_reason="fans")]
    pieces = sl.parse("Partition:8,NodeList:12,StateLong,CPUsState:.14,Memory:7,Reason")
    assert [p.width for p in pieces] == [8, 12, 20, 14, 7, 20]
    # each value cut to its width and padded to it, nothing between the columns (the last
    # padded too), as Slurm 22.05's sinfo -O writes them
    assert si.lines(nodes, pieces, node_oriented=False, header=True) == [
        f"PARTITIONODELIST    {'STATE':20} CPUS(A/I/O/T)MEMORY {'REASON':20}",
        f"local*  n[1-2]      {'idle':20}{'0/8/0/8':>14}8192   {'none':20}",
        f"gpu     g1          {'drained':20}{'0/0/4/4':>14}8192   {'fans':20}",
    ]
    assert sl.parse("nodelist")[0].width == 20  # (any case; 20 unless a width is given)


def test_a_width_and_a_suffix_as_sinfos() -> None:
    """Real 22.05: ``sinfo -O 'partition:3,nodes:.5|,cpus:'`` writes ``PARNODES|CPUS`` (no
    width after the colon: as long as the value; what follows it: written after it)."""
    pieces = sl.parse("partitionname:3,nodes:.5|,cpus:")
    assert si.lines([info("n1")], pieces, node_oriented=False, header=True) == [
        "PARNODES|CPUS",
        "loc    1|4",
    ]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("NodeList,AllocMem", "unknown field 'AllocMem' in 'NodeList,AllocMem'; known: available,"),
        ("GresUsed", "known: available,cores,cpus,cpusload,cpusstate,disk,features,"),
        ("NodeList:9999", "width 9999 of NodeList is too wide"),
        ("  ", "an empty --Format shows nothing: name fields, such as NodeList,StateLong"),
    ],
)
def test_refusals_say_what_is_known(text: str, says: str) -> None:
    with pytest.raises(FormatError, match=says):
        sl.parse(text)


def test_every_lists_under_the_time_until_ctrl_c(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    naps: list[float] = []

    def nap(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) == 2:
            raise KeyboardInterrupt

    answers = iter(["A\n", ControllerError(503, "busy"), "C\n"])

    def listing() -> str:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(time, "sleep", nap)
    monkeypatch.setattr(si, "timestamp", lambda: "Sun Dec 06 19:43:14 2026")
    with pytest.raises(typer.Exit) as ended:
        every(5, listing, dated=True)
    assert ended.value.exit_code == 130 and naps == [5, 5]
    said = capsys.readouterr()
    stamp = "Sun Dec 06 19:43:14 2026\n"
    assert said.out == f"{stamp}A\n\n{stamp}\n"
    assert "busy" in said.err


def test_every_without_the_time_and_a_refusal_ends_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(time, "sleep", lambda _s: None)
    answers = iter(["A\n"])

    def listing() -> str:
        for answer in answers:
            return answer
        raise ControllerError(403, "token revoked")

    with pytest.raises(typer.Exit) as ended:
        every(1, listing, dated=False)
    assert ended.value.exit_code == 2
    said = capsys.readouterr()
    assert said.out == "A\n\n"
    assert "token revoked" in said.err


@pytest.mark.parametrize("seconds", ["0", "-1", "x", "99999999999999"])
def test_a_bad_iterate_is_a_usage_error(seconds: str) -> None:
    """Not a whole number of seconds from 1 to a C int's most (no OverflowError from sleep)."""
    from typer.testing import CliRunner

    from fusesched.cli.main import app

    result = CliRunner().invoke(app, ["sinfo", "--controller", "http://127.0.0.1:9", "-i", seconds])
    assert result.exit_code == 2, result.output
    assert "--iterate" in result.output
