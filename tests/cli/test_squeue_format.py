"""squeue's formats and state names as ``fusesched jobs`` reads them (cli/squeue_format.py):
the edges a script or a typo reaches: zero and enormous widths, empty formats, part CPUs,
accelerators other than whole GPUs, Slurm states fusesched never has, a truncated array."""

from __future__ import annotations

import tracemalloc
from typing import Any

import pytest

from fusesched.cli import id_lists as il
from fusesched.cli import squeue_format as sq
from fusesched.model.phases import OOM_REASON

JOB: dict[str, Any] = {"id": "1234", "name": "train", "state": "Running", "phase": "running"}


def line(fmt: str, **fields: Any) -> str:
    return sq.render(sq.parse_format(fmt), [{**JOB, **fields}], header=False)[0]


def test_a_zero_width_is_no_width_as_in_squeue() -> None:
    assert line("%0i|%.0j|%-0t") == "1234|train|R"
    assert line("%3j|%.6i|%.0005i") == "tra|  1234| 1234"


def test_the_last_field_is_padded_to_its_width_as_squeues() -> None:
    """Checked against Slurm 22.05's squeue: ``-o %10j`` writes ``abc`` and seven blanks
    (the header ``NAME`` and six), ``%2t%100j`` lines of 102 characters, a format's own
    trailing blanks stay, and a last field with no width (the default's ``%R``) is as long
    as its value."""
    abc = {**JOB, "name": "abc"}
    assert sq.render(sq.parse_format("%10j"), [abc]) == ["NAME      ", "abc       "]
    assert [len(x) for x in sq.render(sq.parse_format("%2t%100j"), [abc] * 2)] == [102] * 3
    assert sq.render(sq.parse_format("%i %10j  "), [abc]) == [
        "JOBID NAME        ",
        "1234 abc         ",
    ]
    running = {**JOB, "nodes": ["vm"]}
    assert sq.render(sq.parse_format("%.4t %R"), [running]) == [
        "  ST NODELIST(REASON)",
        "   R vm",
    ]


@pytest.mark.parametrize("fmt", ["%1001i", "%99999999i", "%" + "9" * 5000 + "i", "%.00001001i"])
def test_a_too_wide_field_is_refused_by_its_width(fmt: str) -> None:
    with pytest.raises(sq.FormatError, match=r"too wide \(at most 1000\)") as caught:
        sq.parse_format(fmt)
    assert len(str(caught.value)) < 200  # (a 5000-digit width is not repeated)


def test_a_line_of_many_wide_fields_is_refused_before_it_is_built() -> None:
    tracemalloc.start()
    try:
        with pytest.raises(sq.FormatError, match="wide in all; at most 20000"):
            sq.parse_format("%1000i" * 20_000)
        with pytest.raises(sq.FormatError, match="wide in all"):
            sq.parse_long_format(",".join(["JobID"] * 5_000))
        assert tracemalloc.get_traced_memory()[1] < 50_000_000
    finally:
        tracemalloc.stop()
    assert len(sq.parse_format("%1000i" * 20)) == 20


def test_empty_formats_are_refused() -> None:
    with pytest.raises(sq.FormatError, match="empty --format"):
        sq.parse_format("")
    with pytest.raises(sq.FormatError, match="empty --Format"):
        sq.parse_long_format(" ")


@pytest.mark.parametrize(
    ("item", "written"),
    [  # (each as Slurm 22.05's squeue -O writes it)
        ("JobID", "1234                "),  # 20 wide
        ("JobID:6", "1234  "),
        ("JobID:.6", "  1234"),
        ("JobID:3", "123"),  # (cut to the width)
        ("JobID:", "1234"),  # no width, or 0: as long as the value
        ("JobID:0", "1234"),
        ("JobID:00", "1234"),
        ("JobID:.", "1234"),
        ("JobID:.0", "1234"),
        ("JobID:x", "1234x"),  # what follows the width is written after the field
        ("JobID:6|", "1234  |"),
        ("JobID:.6@@", "  1234@@"),
        ("JobID:²", "1234²"),  # (not a digit: the suffix)
        ("JobID:-6", "1234  "),  # (strtol's -6: left-justified)
        ("JobID:2,,Name:3", "12tra"),  # (a blank item is skipped)
    ],
)
def test_a_long_format_item_is_slurms_name_width_and_suffix(item: str, written: str) -> None:
    assert sq.render(sq.parse_long_format(item), [JOB], header=False) == [written]


def test_a_long_formats_header_is_cut_and_padded_as_its_values() -> None:
    """Real 22.05: ``squeue -O 'JobID:x,name:.3y'`` writes ``JOBIDxNAMy`` and ``27x  xy``."""
    header, row = sq.render(sq.parse_long_format("JobID:x,Name:.3y"), [{**JOB, "name": "x"}])
    assert (header, row) == ("JOBIDxNAMy", "1234x  xy")


def test_a_long_format_width_too_wide_is_refused() -> None:
    with pytest.raises(sq.FormatError, match=r"too wide"):
        sq.parse_long_format(f"JobID:{'1' * 5000}")
    with pytest.raises(sq.FormatError, match="empty --Format"):
        sq.parse_long_format(" , ")


@pytest.mark.parametrize(
    ("cpus", "shown"),
    [(4.0, "4"), (0.5, "0.5"), (0.25, "0.25"), (1_000_000.0, "1000000"), (123456.5, "123456.5")],
)
def test_cpus_are_written_plainly(cpus: float, shown: str) -> None:
    assert line("%C", cpus=cpus) == shown


def test_gres_names_every_accelerator() -> None:
    kinds = {"fusesched.io/gpu-milli": 500, "nvidia.com/gpu": 6, "nvidia.com/mig-1g.10gb": 2}
    assert line("%b", gpus=6, accelerators=kinds) == (
        "gres/fusesched.io/gpu-milli:500,gres/gpu:6,gres/nvidia.com/mig-1g.10gb:2"
    )
    assert line("%b", gpus=0, accelerators={"nvidia.com/mig-1g.10gb": 1}) == (
        "gres/nvidia.com/mig-1g.10gb:1"
    )
    assert line("%b", gpus=0, accelerators={}) == "N/A"
    assert line("%b", gpus=2) == "gres/gpu:2"  # (a controller without accelerators)


def test_slurm_states_fusesched_never_has_match_nothing() -> None:
    assert sq.parse_states(["PD,R,S"]) == sq.StateMatch(states=("Pending", "Running"))
    assert sq.parse_states(["s", "SUSPENDED", "BF"]) == sq.StateMatch()
    with pytest.raises(ValueError, match="unknown job state 'XX'"):
        sq.parse_states(["CG,XX"])


def test_completing_asks_for_the_jobs_the_controller_shows_completing() -> None:
    pending_running = sq.StateMatch(states=("Pending", "Running"))
    assert sq.parse_states(["PD,R,CG"]) == pending_running._replace(completing=True)
    assert sq.parse_states(["completing"]) == sq.StateMatch(completing=True)
    assert sq.parse_states(["cg", "SUSPENDED"]) == sq.StateMatch(completing=True)
    assert not sq.parse_states(["PD,R"]).completing


def test_a_job_shown_cg_is_listed_for_cg_only_as_slurm_s_flag_state() -> None:
    shown_cg = {**JOB, "state": "Cancelled", "phase": "cancelled", "completing": True}
    ended = {**shown_cg, "completing": False}
    cancelled, cg = sq.parse_states(["CA"]), sq.parse_states(["CG"])
    assert (sq.matches(cancelled, shown_cg), sq.matches(cancelled, ended)) == (False, True)
    assert sq.matches(cg, shown_cg) and sq.matches(sq.parse_states(["all"]), shown_cg)
    # (an older controller ignores completing=true and answers every job, saying nothing)
    assert not sq.matches(cg, {k: v for k, v in ended.items() if k != "completing"})


def test_a_completing_job_shows_cg_whatever_state_it_ended_in() -> None:
    job = {**JOB, "state": "Cancelled", "phase": "cancelled", "completing": True}
    assert (sq.slurm_state(job), sq.state_code(job)) == ("COMPLETING", "CG")
    assert line("%t %T", state="Completed", completing=True) == "CG COMPLETING"
    assert sq.state_code({**job, "completing": False}) == "CA"  # (once its hold has ended)


NODE_DOWN = "NodeDown: node n0 stopped heartbeating; not requeued (--no-requeue)"


def test_a_job_failed_by_a_lost_node_shows_nf_and_is_listed_for_nf_only() -> None:
    lost = {**JOB, "state": "Failed", "phase": "failed", "reason": NODE_DOWN}
    failed = {**lost, "reason": "exit 3"}
    assert line("%t %T", **lost) == "NF NODE_FAIL"
    assert line("%t %T", **failed) == "F FAILED"
    nf, f = sq.parse_states(["nf"]), sq.parse_states(["F"])
    assert nf == sq.StateMatch(phases=("failed",), failed=("NODE_FAIL",))
    assert (sq.matches(nf, lost), sq.matches(nf, failed)) == (True, False)
    assert (sq.matches(f, lost), sq.matches(f, failed)) == (False, True)
    both, every = sq.parse_states(["F,node_fail"]), sq.parse_states(["all"])
    assert all(sq.matches(m, j) for m in (both, every) for j in (lost, failed))
    # (a node's loss in the reason's text, not its marker: a plain failure)
    assert sq.slurm_state({**failed, "reason": "node n0 stopped heartbeating"}) == "FAILED"


def test_a_job_the_oom_killer_ended_shows_oom_as_sacct_does() -> None:
    """squeue -t all (or -t OOM) showed such a job FAILED while sacct said OUT_OF_MEMORY."""
    oom = {**JOB, "state": "Failed", "phase": "failed", "reason": OOM_REASON}
    failed = {**oom, "reason": "exit 3"}
    assert line("%t %T", **oom) == "OOM OUT_OF_MEMORY"
    by_oom, by_f = sq.parse_states(["oom"]), sq.parse_states(["F"])
    assert (sq.matches(by_oom, oom), sq.matches(by_oom, failed)) == (True, False)
    assert (sq.matches(by_f, oom), sq.matches(by_f, failed)) == (False, True)
    assert sq.matches(sq.parse_states(["all"]), oom)


def test_a_truncated_arrays_summary_says_so() -> None:
    members = [{"id": f"5_{i}", "state": "Pending", "phase": "queued"} for i in range(3)]
    assert il.array_summary("5", members) == "array 5: 3 members: 3 PENDING"
    assert il.array_summary("5", members, complete=False) == (
        "array 5: the newest 3 members: 3 PENDING"
    )


def test_control_characters_in_values_stay_on_their_line() -> None:
    assert line("%j|%u", name="a\nb\x1b]0;pwned\x07", user="x\x9by") == "a?b?]0;pwned?|x?y"
    lines = sq.render(sq.parse_format("%i %j"), [{**JOB, "name": "two\nlines"}] * 2)
    assert lines == ["JOBID NAME", "1234 two?lines", "1234 two?lines"]


def test_the_nodes_are_slurms_short_host_list_in_their_order() -> None:
    """``%N`` (and ``%R`` of a running job) as squeue writes them, ``node[1-3,7]``; in the
    allocation's order, which ``scontrol show hostnames`` gives back."""
    job = {"state": "Running", "nodes": ["node3", "node1", "node2", "node7", "gpu-a"]}
    assert sq.FIELDS["N"].value(job) == "node[3,1-2,7],gpu-a"
    assert sq.FIELDS["R"].value(job) == "node[3,1-2,7],gpu-a"


def test_widths_count_bytes_as_slurms_printf_and_never_split_a_character() -> None:
    """Checked against Slurm 22.05's squeue: ``-o '%10j|%.10j|%4j|'`` of a job named
    ``héllo`` (six UTF-8 bytes) writes ``héllo    |    héllo|hél|``; a cut that would split
    a character (Slurm's writes its first bytes) leaves blanks instead. sinfo's share it."""
    assert line("%10j|%.10j|%4j|", name="héllo") == "héllo    |    héllo|hél|"
    wide = line("%10j|%.10j|", name="日本語ジョブ")
    assert wide == "日本語 | 日本語|"
    assert [len(x.encode()) for x in wide.split("|")[:2]] == [10, 10]
    long_fmt = sq.render(sq.parse_long_format("Name:8|"), [{**JOB, "name": "ééé"}], False)
    assert long_fmt == ["ééé  |"]
