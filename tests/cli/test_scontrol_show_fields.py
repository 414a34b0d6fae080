"""``scontrol show job``'s ``WorkDir``, ``StdErr``/``StdIn``/``StdOut``, ``Command`` and
``Dependency``, as Slurm 22.05 writes them: the controller's view of a stored job
(:func:`fusesched.controller.job_view.run_fields`), the record made of it (pure), and the
shell that looks up the jobs a waiting job's dependencies name."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from fusesched.api.job_schemas import JobView
from fusesched.cli import scontrol
from fusesched.cli.scontrol_show import dependency_targets, dependency_text, job_record, render
from fusesched.controller.job_view import LISTED_COMMAND, job_view, listed_views, run_fields
from fusesched.sdk import ControllerError
from fusesched.store import Store
from fusesched.store.records import JobRow, JobState
from fusesched.submit.salloc_holder import READY

NOW = 1_800_000_000.0
SCRIPT = "#!/bin/sh\nsleep 30\n"


def _row(request: dict[str, Any], **extra: Any) -> JobRow:
    fields: dict[str, Any] = {
        "id": "12",
        "seq": 12,
        "user": "ann",
        "state": JobState.PENDING,
        "phase": "queued",
        "submit_time": NOW - 10,
        "name": "train",
        **extra,
    }
    return JobRow(request=request, **fields)


def _batch(**extra: Any) -> dict[str, Any]:
    group = {"name": "main", "resources": {"cpu": "1"}, "script": SCRIPT}
    return {"groups": [group], "output": "slurm-%j.out", "submit_dir": "/home/ann/run", **extra}


def _lines(view: JobView | dict[str, Any], others: dict[str, Any] | None = None) -> list[str]:
    job = view.model_dump() if isinstance(view, JobView) else view
    return render([job_record(job, NOW, others)], oneliner=False).rstrip("\n").splitlines()


# ---------------------------------------------------------------------- the view


def test_a_batch_scripts_files_are_expanded_in_its_working_directory() -> None:
    view = job_view(_row(_batch()), ())
    assert (view.workdir, view.command) == ("/home/ann/run", None)
    assert view.output_file == view.error_file == "/home/ann/run/slurm-12.out"
    lines = _lines(view)
    tres = lines.index("   TRES=cpu=1,node=1")
    assert lines[tres + 1 :] == [
        "   Command=(null)",  # (a batch script: as Slurm's --wrap; fusesched keeps no file)
        "   WorkDir=/home/ann/run",
        "   StdErr=/home/ann/run/slurm-12.out",
        "   StdIn=/dev/null",
        "   StdOut=/home/ann/run/slurm-12.out",
    ]


def test_an_array_members_patterns_and_its_own_error_file() -> None:
    group = {"name": "main", "resources": {"cpu": "1"}, "script": SCRIPT, "workdir": "sub"}
    request = {
        "groups": [group],
        "output": "o-%A_%a-%x-%u-%N.log",
        "error": "/logs/e-%j.err",
        "submit_dir": "/home/ann",
    }
    running = _row(
        request, id="7_2", array_parent="7", state=JobState.RUNNING, nodes=("n3.lab", "n4")
    )
    view = job_view(running, ())
    assert view.workdir == "/home/ann/sub"  # (a relative -D: against the submit folder)
    assert view.output_file == "/home/ann/sub/o-7_2-train-ann-n3.log"
    assert view.error_file == "/logs/e-7_2.err"
    lines = _lines(view)
    assert lines[0] == "JobId=7_2 ArrayJobId=7 ArrayTaskId=2 JobName=train"
    assert "   StdErr=/logs/e-7_2.err" in lines
    assert "   StdOut=/home/ann/sub/o-7_2-train-ann-n3.log" in lines
    # before it has a node, %N is kept as written (as Slurm's scontrol shows it)
    waiting = _row(request, id="7_3", array_parent="7")
    assert run_fields(waiting).output_file == "/home/ann/sub/o-7_3-train-ann-%N.log"


def test_the_default_array_output_and_an_absolute_workdir() -> None:
    group = {"name": "main", "resources": {"cpu": "1"}, "script": SCRIPT, "workdir": "/scratch"}
    request = {"groups": [group], "output": "slurm-%A_%a.out", "submit_dir": "/home/ann"}
    fields = run_fields(_row(request, id="40_3", array_parent="40"))
    assert fields.workdir == "/scratch"
    assert fields.output_file == fields.error_file == "/scratch/slurm-40_3.out"


def test_a_programs_command_and_no_output_lines() -> None:
    group = {"name": "main", "resources": {"cpu": "1"}, "argv": ["python", "train.py", "a b"]}
    view = job_view(_row({"groups": [group], "submit_dir": "/home/ann"}), ())
    assert (view.command, view.workdir) == ("python train.py a b", "/home/ann")
    assert view.output_file is None
    lines = _lines(view)
    assert "   Command=python train.py a b" in lines and "   WorkDir=/home/ann" in lines
    assert not [line for line in lines if line.startswith("   Std")]  # (no batch job)


def test_a_listings_command_is_cut_a_jobs_own_view_is_whole(tmp_path: Path) -> None:
    # (GET /v1/jobs, squeue's hot path: an array's members each carried a whole argv of
    # thousands of files, megabytes a page)
    argv = ["python", "proc.py", *(f"/data/part-{k:06d}.parquet" for k in range(2000))]
    group = {"name": "main", "resources": {"cpu": "1"}, "argv": argv}
    long = _row({"groups": [group], "submit_dir": "/home/ann"})
    short = _row({"groups": [{**group, "argv": ["python", "a b"]}]}, id="13", seq=13)
    whole = " ".join(argv)
    assert job_view(long, ()).command == whole  # (GET /v1/jobs/{id})
    with Store(f"sqlite:///{tmp_path / 'jobs.db'}") as store:
        store.add_jobs([long, short])
        for detail, steps in ((False, False), (True, False), (False, True)):
            cut, kept = listed_views(store, [long, short], detail, steps)
            assert cut.command is not None and len(cut.command) == LISTED_COMMAND
            assert cut.command.endswith("...") and whole.startswith(cut.command[:-3])
            assert kept.command == "python a b"


@pytest.mark.parametrize(
    ("request_", "fields"),
    [
        # a container: its image's folder, no output files (the agent writes none)
        (
            {
                "groups": [
                    {
                        "name": "main",
                        "resources": {"cpu": "1"},
                        "script": SCRIPT,
                        "image": "/images/py",
                        "workdir": "/work",
                    }
                ],
                "output": "slurm-%j.out",
                "submit_dir": "/home/ann",
            },
            ("/work", None, None, None),
        ),
        # no submit folder (a request made by hand): a relative output file is not written
        ({**_batch(), "submit_dir": None}, (None, None, None, None)),
        # salloc's allocation: its holding script is no user's command, and writes no file
        (
            {
                "groups": [
                    {"name": "main", "resources": {"cpu": "1"}, "script": f'echo "{READY}"\n'}
                ],
                "output": "slurm-%j.out",
                "submit_dir": "/home/ann",
            },
            ("/home/ann", None, None, None),
        ),
        # a request stored by an older release, or mistyped: nothing guessed
        ({"groups": "odd", "output": 3, "dependencies": [{"kind": 1}, "x"]}, (None,) * 4),
    ],
)
def test_what_is_not_known_or_not_written(request_: dict[str, Any], fields: tuple[Any]) -> None:
    assert tuple(run_fields(_row(request_))) == fields
    assert job_view(_row(request_), ()).dependencies == []


def test_a_batch_job_without_an_output_file_and_salloc_s_allocation() -> None:
    view = job_view(_row({**_batch(), "submit_dir": None}), ())
    lines = _lines(view)
    assert "   WorkDir=(null)" in lines and "   StdOut=(null)" in lines
    assert "   StdErr=(null)" in lines
    allocation = {**view.model_dump(), "allocation": True}
    lines = _lines(allocation)  # (Slurm's salloc job: no batch script, no Std lines)
    assert "   BatchFlag=0 ExitCode=0:0" in lines
    assert not [line for line in lines if line.startswith("   Std")]


def test_an_older_controllers_view_shows_none_of_them() -> None:
    old = job_view(_row(_batch()), ()).model_dump()
    for key in ("dependencies", "workdir", "output_file", "error_file", "command"):
        del old[key]
    old["comment"] = "for the paper"
    lines = _lines(old)
    assert "   JobState=PENDING Reason=None" in lines
    assert lines[-1] == "   Comment=for the paper"
    assert not [line for line in lines if line.split("=")[0].strip() in ("Command", "WorkDir")]


def test_comment_and_licenses_in_slurms_order() -> None:
    view = job_view(_row({**_batch(), "comment": "hi there", "licenses": {"matlab": 2}}), ())
    lines = _lines(view)
    at = lines.index("   Licenses=matlab:2")
    assert lines[at + 1 : at + 5] == [
        "   Command=(null)",
        "   WorkDir=/home/ann/run",
        "   Comment=hi there",
        "   StdErr=/home/ann/run/slurm-12.out",
    ]


# ---------------------------------------------------------------------- dependencies


def _waiter(*deps: tuple[str, str], **extra: Any) -> dict[str, Any]:
    request = _batch(dependencies=[{"kind": k, "job_id": j} for k, j in deps])
    fields: dict[str, Any] = {"phase": "pending", "reason": "Dependency: job 3", **extra}
    return job_view(_row(request, **fields), ()).model_dump()


def _job(job_id: str, phase: str, parent: str | None = None) -> dict[str, Any]:
    return {"id": job_id, "phase": phase, "array_parent": parent}


def test_dependencies_as_slurm_writes_them() -> None:
    waiter = _waiter(("afterok", "3"), ("afterany", "4"), ("afternotok", "5"))
    assert dependency_targets(waiter) == ["3", "4", "5"]
    others = {
        "3": [_job("3", "completed")],
        "4": [_job("4", "running")],
        "5": [_job("5", "queued")],
    }
    # (a met one is left out, as Slurm's)
    assert dependency_text(waiter, others) == "afterany:4(unfulfilled),afternotok:5(unfulfilled)"
    assert _lines(waiter, others)[3] == (
        "   JobState=PENDING Reason=Dependency "
        "Dependency=afterany:4(unfulfilled),afternotok:5(unfulfilled)"
    )
    failed = {"3": [_job("3", "failed")], "5": [_job("5", "completed")]}
    assert dependency_text(waiter, failed) == (
        "afterok:3(failed),afterany:4(unfulfilled),afternotok:5(failed)"
    )
    met = {
        "3": [_job("3", "completed")],
        "4": [_job("4", "cancelled")],
        "5": [_job("5", "timeout")],
    }
    assert dependency_text(waiter, met) == "(null)"


def test_a_started_or_queued_job_waits_for_none() -> None:
    for extra in ({"phase": "queued"}, {"phase": "running", "start_time": NOW - 5}):
        waiter = _waiter(("afterok", "3"), **extra)
        assert dependency_targets(waiter) == []
        assert dependency_text(waiter, {}) == "(null)"
    plain = job_view(_row(_batch()), ()).model_dump()
    assert dependency_text(plain, {}) == "(null)"
    assert "   JobState=PENDING Reason=None Dependency=(null)" in _lines(plain)


def test_dependencies_on_arrays_and_unknown_jobs() -> None:
    waiter = _waiter(("afterok", "40"), ("after", "41"), ("afterok", "99"), id="50_2")
    array = [_job("40_1", "completed", "40"), _job("40_2", "running", "40")]
    started = [_job("41_1", "running", "41"), _job("41_2", "completed", "41")]
    others = {"40": array, "41": started}  # (99: not seen, or gone)
    assert dependency_text(waiter, others) == "afterok:40_*(unfulfilled),afterok:99(unfulfilled)"
    broken = {"40": [*array, _job("40_3", "failed", "40")], "41": started}
    assert dependency_text(waiter, broken).startswith("afterok:40_*(failed),")
    # aftercorr: the member of its own index (50_2 waits for 40_2 alone)
    corr = _waiter(("aftercorr", "40"), id="50_2", array_parent="50")
    assert dependency_text(corr, others) == "aftercorr:40_*(unfulfilled)"
    done = [_job("40_1", "running", "40"), _job("40_2", "completed", "40")]
    assert dependency_text(corr, {"40": done}) == "(null)"
    # afternotok on an array: once all ended, one not completed
    notok = _waiter(("afternotok", "40"))
    assert dependency_text(notok, {"40": done}) == "afternotok:40_*(unfulfilled)"
    ended = [_job("40_1", "completed", "40"), _job("40_2", "completed", "40")]
    assert dependency_text(notok, {"40": ended}) == "afternotok:40_*(failed)"


def test_a_singleton_names_no_job() -> None:
    waiter = _waiter(("singleton", ""))
    assert dependency_targets(waiter) == []
    assert dependency_text(waiter, {}) == "singleton(unfulfilled)"
    gone = _waiter(("singleton", ""), state=JobState.CANCELLED, phase="cancelled")
    assert dependency_text(gone, {}) == "(null)"


# ---------------------------------------------------------------------- the shell


class FakeClient:
    """The controller's answers to ``show job``: ``views`` by id, arrays' members by id, the
    ``listing`` (``GET /v1/jobs``); ``asked`` says what was asked, in order."""

    def __init__(
        self, views: dict[str, Any], arrays: dict[str, list[Any]], listing: Sequence[Any] = ()
    ) -> None:
        self.views, self.arrays, self.listing = views, arrays, list(listing)
        self.asked: list[str] = []
        self.refused: int | None = None  # the status GET /v1/jobs?id=… answers with

    def show(self, job_id: str) -> Any:
        self.asked.append(job_id)
        if job_id not in self.views:
            raise ControllerError(404, f"no job {job_id!r}")
        return self.views[job_id]

    def jobs(self, array: str | None = None, limit: int = 0, ids: Sequence[str] = ()) -> list[Any]:
        if ids:
            self.asked.append(f"id={','.join(ids)}")
            if self.refused is not None:
                raise ControllerError(self.refused, "no")
            found = [v for k, v in self.views.items() if k in ids]
            return (found + [m for a in ids for m in self.arrays.get(a, [])])[:limit]
        if array is None:
            return list(reversed(self.listing))[:limit]
        self.asked.append(f"array={array}")
        return list(self.arrays.get(array, []))[:limit]


def _show(fake: FakeClient, monkeypatch: pytest.MonkeyPatch, *words: str) -> None:
    monkeypatch.setattr("fusesched.sdk.Client", lambda *a, **k: fake)
    assert scontrol.run(["show", "job", *words], "http://x", None, None) == 0


def test_show_job_looks_up_what_its_dependencies_name_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    waiter = _waiter(("afterok", "3"), ("afterany", "3"), ("afterok", "40"), ("afterok", "8"))
    waiter["id"] = "51"
    fake = FakeClient(
        {"51": waiter, "3": _job("3", "running")},
        {"40": [_job("40_2", "completed", "40"), _job("40_1", "failed", "40")]},
    )
    _show(fake, monkeypatch, "51")
    out = capsys.readouterr().out
    assert (
        "Dependency=afterok:3(unfulfilled),afterany:3(unfulfilled),afterok:40_*(failed),"
        "afterok:8(unfulfilled)\n" in out
    )
    assert fake.asked == ["51", "id=3,40,8"]  # (each once, in one call)


def test_a_thousand_waiting_jobs_are_not_a_thousand_calls(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # (each waits on a job of its own that is not listed: half arrays, half single jobs)
    listing = [{**_waiter(("afterok", str(i))), "id": str(5000 + i)} for i in range(1, 1001)]
    arrays = {str(i): [_job(f"{i}_1", "completed", str(i))] for i in range(1, 501)}
    views = {str(i): _job(str(i), "running") for i in range(501, 1001)}
    fake = FakeClient(views, arrays, listing)
    _show(fake, monkeypatch)
    out = capsys.readouterr().out
    assert len(fake.asked) == 10  # (a hundred ids a call; not 1,500 calls)
    assert out.count("Dependency=(null)") == 500  # (the arrays' members all completed)
    assert out.count("(unfulfilled)") == 500 and "afterok:777(unfulfilled)" in out


def test_a_listing_that_may_be_cut_short_and_odd_ids_are_looked_up_one_by_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(scontrol, "MAX_JOBS", 3)
    waiter = _waiter(("afterok", "3"), ("afterok", "40"), ("afterok", "x1"))
    waiter["id"] = "51"
    members = [_job(f"40_{i}", "completed", "40") for i in (1, 2, 3)]
    fake = FakeClient({"51": waiter, "3": _job("3", "completed")}, {"40": members})
    _show(fake, monkeypatch, "51")
    # (40's members may be more than the three read: not known to be all completed)
    assert "Dependency=afterok:40_*(unfulfilled),afterok:x1(unfulfilled)\n" in (
        capsys.readouterr().out
    )
    assert fake.asked == ["51", "id=3,40", "3", "40", "array=40", "x1"]


def test_dependencies_the_caller_may_not_list_are_unfulfilled(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    waiter = _waiter(("afterok", "3"))
    waiter["id"] = "51"
    fake = FakeClient({"51": waiter, "3": _job("3", "completed")}, {})
    fake.refused = 403
    _show(fake, monkeypatch, "51")
    assert "Dependency=afterok:3(unfulfilled)\n" in capsys.readouterr().out
    assert fake.asked == ["51", "id=3"]
    fake.refused = 500  # (anything else is said, as every other error)
    monkeypatch.setattr("fusesched.sdk.Client", lambda *a, **k: fake)
    assert scontrol.run(["show", "job", "51"], "http://x", None, None) == 1
    assert "scontrol: error:" in capsys.readouterr().err
