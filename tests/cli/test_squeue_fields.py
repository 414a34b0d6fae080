"""squeue's fields as ``fusesched squeue -o`` prints them (cli/squeue_fields.py): every letter
Open OnDemand asks for reads as Slurm 22.05's does (checked against a real one here), a
format's own separators survive, ``%all``, ``%m``'s units, and ``-S``'s order
(cli/squeue_sort.py)."""

from __future__ import annotations

import getpass
import time
from typing import Any

import pytest

from fusesched.cli import squeue_format as sq
from fusesched.cli.squeue_extra import memory_text
from fusesched.cli.squeue_sort import SortKey, id_order, parse_sort, sort_rows

Job = dict[str, Any]
#: Open OnDemand's squeue fields (its Slurm adapter), in its order.
OOD_LETTERS = (
    "a A B c C d D e E f F g G h H i I j J k K l L m M n N o O q P Q r S t T u U v V w W x X y Y "
    "z Z b"
)
RUNNING: Job = {
    "id": "26",
    "name": "stepper",
    "user": "nobody-here-at-all",
    "tenant": "physics",
    "queue": "default",
    "state": "Running",
    "phase": "running",
    "qos": "silver",
    "nodes": ["local-1", "local-2"],
    "cpus": 2.0,
    "cpus_per_task": 1.0,
    "time_limit_s": 180.0,
    "submit_time": 1000.0,
    "start_time": 1000.0,
    "workdir": "/tmp",
    "licenses": {"matlab": 2, "abaqus": 1},
    "priority": 7,
}


def values(fmt: str, job: Job) -> list[str]:
    return sq.render(sq.parse_format(fmt), [job], header=False)[0].split("\x1f")


def test_open_ondemands_format_reads_every_field_as_slurms() -> None:
    """Record and unit separators as OOD writes them; each letter known, each value where
    OOD (and a person) looks for it, the unset ones as a real Slurm 22.05 prints them."""
    fmt = "\x1e" + "\x1f".join(f"%{letter}" for letter in OOD_LETTERS.split())
    header, line = sq.render(sq.parse_format(fmt), [RUNNING])
    assert header.startswith("\x1eACCOUNT\x1fJOBID\x1fEXEC_HOST\x1fMIN_CPUS\x1f")
    shown = dict(zip(OOD_LETTERS.split(), line.removeprefix("\x1e").split("\x1f"), strict=True))
    assert shown["a"] == "physics" and shown["A"] == "26" and shown["i"] == "26"
    assert shown["B"] == "local-1" and shown["N"] == "local-[1-2]" and shown["D"] == "2"
    assert shown["c"] == "1" and shown["C"] == "2" and shown["F"] == "26" and shown["K"] == "N/A"
    assert shown["l"] == "3:00" and shown["m"] == "0" and shown["P"] == "default"
    assert shown["t"] == "R" and shown["T"] == "RUNNING" and shown["q"] == "silver"
    assert shown["W"] == "abaqus:1,matlab:2" and shown["Z"] == "/tmp" and shown["b"] == "N/A"
    assert shown["U"] == shown["G"] == shown["g"] == "N/A"  # (no such user on this machine)
    unset = {"d": "0", "E": "(null)", "f": "(null)", "h": "OK", "H": "*", "I": "*", "J": "*"}
    unset |= {"k": "(null)", "n": "", "o": "(null)", "O": "0", "v": "(null)", "w": "(null)"}
    unset |= {"x": "", "X": "N/A", "y": "0", "Y": "(null)", "z": "*:*:*"}
    assert {k: shown[k] for k in unset} == unset


def test_a_lines_separators_and_padding_are_kept() -> None:
    """A line whose last fields are empty keeps its unit separators (Python's ``rstrip()``
    takes ``\\x1f`` for a blank): a tool splitting on them finds every field; the last
    field is padded to its width, as Slurm's squeue pads it."""
    line = sq.render(sq.parse_format("%i\x1f%n\x1f%x\x1f%-10j"), [RUNNING], header=False)[0]
    assert line == "26\x1f\x1f\x1fstepper   "
    assert sq.render(sq.parse_format("%i\x1f%n\x1f%x"), [RUNNING], header=False) == ["26\x1f\x1f"]


def test_the_local_users_ids_and_group() -> None:
    me = getpass.getuser()
    uid, gid, group = values("%U\x1f%G\x1f%g", {**RUNNING, "user": me})
    assert uid.isdigit() and gid.isdigit() and group


def test_time_left_is_the_limit_less_the_time_used() -> None:
    now = time.time()
    assert values("%L", {**RUNNING, "start_time": now - 61}) == ["1:59"]
    assert values("%L", {**RUNNING, "start_time": now - 999}) == ["0:00"]
    assert values("%L", {**RUNNING, "time_limit_s": None}) == ["UNLIMITED"]
    assert values("%L", {**RUNNING, "state": "Pending", "start_time": None}) == ["3:00"]


def test_a_waiting_jobs_dependencies_as_squeue_writes_them() -> None:
    deps = [{"kind": "afterok", "job_id": "38"}, {"kind": "singleton", "job_id": ""}]
    waiting = {**RUNNING, "state": "Pending", "nodes": [], "dependencies": deps}
    assert values("%E", waiting | {"reason": "Dependency: job 38"}) == [
        "afterok:38(unfulfilled),singleton(unfulfilled)"
    ]
    assert values("%E", waiting | {"reason": "DependencyNeverSatisfied"}) == [
        "afterok:38(failed),singleton(failed)"
    ]
    assert values("%E", waiting | {"reason": "Priority"}) == ["(null)"]  # (met: none left)
    assert values("%E", {**RUNNING, "dependencies": deps}) == ["(null)"]
    assert values("%B", waiting) == ["n/a"]


def test_all_is_every_field_each_with_a_bar() -> None:
    header, line = sq.render(sq.parse_format("%all"), [RUNNING])
    assert header.startswith("JOBID|JOBID|ARRAY_JOB_ID|") and header.endswith("|")
    assert header.count("|") == len(sq.FIELDS) == line.count("|")


def test_new_long_names_are_the_letters() -> None:
    pieces = sq.parse_long_format("TimeLeft,MinMemory:.6,BatchHost:8,workdir,Licenses:30")
    line = sq.render(pieces, [{**RUNNING, "start_time": time.time()}], header=False)[0]
    assert line.split() == ["3:00", "0local-1", "/tmp", "abaqus:1,matlab:2"]
    assert line == f"{'3:00':20}{'0':>6}{'local-1':8}{'/tmp':20}{'abaqus:1,matlab:2':30}"


@pytest.mark.parametrize(
    ("megabytes", "convert", "shown"),
    [
        (100, True, "100M"),
        (2048, True, "2G"),
        (1500, True, "1500M"),
        (2048, False, "2048M"),
        (3 * 1024**3, True, "3P"),
        (1024**4, True, "1024P"),
    ],
)
def test_memory_is_converted_only_where_exact(megabytes: int, convert: bool, shown: str) -> None:
    assert memory_text(megabytes, convert) == shown


def test_sort_ids_and_times_as_numbers_states_in_slurms_order() -> None:
    jobs = [
        {"id": "10", "state": "Running", "phase": "running", "priority": 1, "queue": "b"},
        {"id": "9", "state": "Pending", "phase": "queued", "priority": 5, "queue": "a"},
        {"id": "9_10", "state": "Completed", "phase": "completed", "priority": 5, "queue": "a"},
        {"id": "9_2", "state": "Running", "phase": "running", "priority": 3, "queue": "b"},
    ]

    def ids(spec: str) -> list[str]:
        return [j["id"] for j in sort_rows(jobs, parse_sort(spec, sq.FIELDS), sq.FIELDS)]

    assert ids("i") == ["9", "9_2", "9_10", "10"]
    assert ids("-i") == ["10", "9_10", "9_2", "9"]
    assert ids("t,i") == ["9", "9_2", "10", "9_10"]  # (PD, R, R, CD)
    assert ids("P,-p,i") == ["9", "9_10", "9_2", "10"]
    assert ids("+P, cluster ,-Q") == ["9", "9_10", "9_2", "10"]  # (ties keep their order)
    assert id_order("37.0") < id_order("37.1") < id_order("37.batch") < id_order("37.extern")


@pytest.mark.parametrize(
    ("spec", "said"),
    [("%i", "unknown sort field '%i'"), ("P,,i", "an empty sort field"), ("-", "an empty")],
)
def test_a_bad_sort_is_refused_naming_the_letters(spec: str, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        parse_sort(spec, sq.FIELDS)
    assert SortKey("i", True) == parse_sort("-i", sq.FIELDS)[0]
