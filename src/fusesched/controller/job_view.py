"""A stored job as the API shows it (:class:`JobView`): its row, its request's fields read
defensively (a request stored by an older release may lack or mistype them) and its tasks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from fusesched.api.job_schemas import DependencyView, JobView, StepSummaryView, TaskView
from fusesched.controller.hetjob_env import stored_components
from fusesched.controller.job_sizes import batch_started, job_size
from fusesched.controller.output_files import batch_outputs, start_dirs
from fusesched.model import step_summary
from fusesched.model.array_tasks import combined_id, task_text
from fusesched.store.array_rows import ArrayRow, Listed
from fusesched.store.records import JobRow, JobState, TaskRow
from fusesched.submit.job_notify import stored_mail
from fusesched.submit.salloc_holder import holds_allocation

if TYPE_CHECKING:
    from fusesched.store.store import Store

#: Jobs whose tasks one read loads to summarise their steps (``GET /v1/jobs?steps=true``):
#: what the controller holds of tasks at once is theirs, not a whole page's.
STEP_CHUNK: Final = 50
#: The node a pattern's ``%N`` names before the job has one: kept as written (as Slurm's
#: scontrol shows it).
NO_NODE: Final = "%N"
#: The most characters of a job's command a listing shows (``GET /v1/jobs``, which squeue
#: reads again and again: an array of a thousand members whose arguments name thousands of
#: files is not megabytes a member); a longer one is cut, ending in :data:`CUT`. A job's own
#: view (``GET /v1/jobs/{id}``) shows all of it.
LISTED_COMMAND: Final = 1024
CUT: Final = "..."


class RunFields(NamedTuple):
    """Where a job's first task runs and what it runs (:class:`JobView`'s fields)."""

    workdir: str | None
    output_file: str | None
    error_file: str | None
    command: str | None


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _licenses(value: object) -> dict[str, int]:
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, int)}


def _number_or_none(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _dependencies(value: object) -> list[DependencyView]:
    if not isinstance(value, list):
        return []
    out = []
    for dep in value:
        if isinstance(dep, Mapping) and isinstance(dep.get("kind"), str):
            job_id = dep.get("job_id")
            out.append(DependencyView(kind=dep["kind"], job_id=_text_or_none(job_id) or ""))
    return out


def _array_index(row: JobRow) -> int | None:
    parent = row.array_parent
    index = row.id.rpartition("_")[2] if parent and row.id.startswith(f"{parent}_") else ""
    return int(index) if index.isascii() and index.isdigit() else None


def _command(argv: object, limit: int | None) -> str | None:
    """``argv``'s words space-separated (None: no list of words), past ``limit`` characters
    cut (:data:`CUT`; None: whole). Only the words shown are read: a cut command of a
    thousand-word argv costs what its first words cost."""
    if not isinstance(argv, list) or not argv:
        return None
    words: list[str] = []
    size = -1
    for word in argv:
        if not isinstance(word, str):
            return None
        words.append(word)
        size += len(word) + 1
        if limit is not None and size > limit:
            return " ".join(words)[: max(limit - len(CUT), 0)] + CUT
    return " ".join(words)


def run_fields(row: JobRow, command_limit: int | None = None) -> RunFields:
    """The working directory, output and error files and command of ``row``'s first task, as
    the controller starts it (controller/run_launches.py): a container's runs where its image
    says, with no output files and no submit folder; a batch script's files are expanded
    with :func:`~fusesched.controller.output_files.batch_outputs` for its first node (none
    yet: ``%N`` kept). Its command past ``command_limit`` characters is cut (None: whole)."""
    request = row.request
    groups = request.get("groups")
    group: Mapping[str, Any] = {}
    if isinstance(groups, list) and groups and isinstance(groups[0], Mapping):
        group = groups[0]
    native = group.get("image") is None
    submitted = _text_or_none(request.get("submit_dir")) if native else None
    workdir, entered = start_dirs(_text_or_none(group.get("workdir")), submitted)
    where = workdir or entered
    out = err = None
    if native and batch_started(request) and not holds_allocation(request):
        out, err = batch_outputs(
            _text_or_none(request.get("output")),
            _text_or_none(request.get("error")),
            where,
            job_id=row.id,
            array_job=row.array_parent,
            array_index=_array_index(row),
            user=row.user,
            name=row.name,
            node=row.nodes[0] if row.nodes else NO_NODE,
        )
    command = None
    if group.get("script") is None:  # (salloc's: a script)
        command = _command(group.get("argv"), command_limit)
    return RunFields(where, out, err if err is not None else out, command)


def listed_views(store: Store, rows: Sequence[JobRow], detail: bool, steps: bool) -> list[JobView]:
    """``GET /v1/jobs``'s views of ``rows``: ``detail``, each with its tasks and restarts;
    ``steps``, with its restarts and its latest run's steps summarised (what they read of
    their tasks read :data:`STEP_CHUNK` jobs at a time: a page of big jobs is never all in
    memory)."""
    if not (detail or steps):
        return [job_view(row, (), listed=True) for row in rows]
    restarts = store.restarts([row.id for row in rows])
    if not steps:
        tasks = store.tasks_of_jobs([row.id for row in rows])
        return [job_view(r, tasks.get(r.id, ()), restarts.get(r.id, 0), listed=True) for r in rows]
    shown: list[JobView] = []
    for first in range(0, len(rows), STEP_CHUNK):
        part = rows[first : first + STEP_CHUNK]
        ids = [row.id for row in part]
        read = store.step_tasks_of_jobs(ids)
        full = store.tasks_of_jobs(ids) if detail else {}
        for row in part:
            summary = step_views(row, read.get(row.id, ()))
            read_tasks = full.get(row.id, ())
            shown.append(job_view(row, read_tasks, restarts.get(row.id, 0), summary, listed=True))
    return shown


def row_views(store: Store, rows: Sequence[Listed], detail: bool, steps: bool) -> list[JobView]:
    """:func:`listed_views` of a listing whose arrays' waiting members are combined: each
    :class:`ArrayRow` as its newest member's view with the combined id, its indices and
    count (``array_tasks``, ``array_count``); one of a single member as that member's (as
    squeue shows the last of an array's waiting members)."""
    newest = [row.newest if isinstance(row, ArrayRow) else row for row in rows]
    views = listed_views(store, newest, detail, steps)
    out = []
    for row, view in zip(rows, views, strict=True):
        if isinstance(row, ArrayRow) and row.count > 1:
            tasks = task_text(row.indices, row.throttle)
            parent = row.newest.array_parent or ""
            view = view.model_copy(
                update={
                    "id": combined_id(parent, row.indices, row.throttle),
                    "array_tasks": tasks,
                    "array_count": row.count,
                }
            )
        out.append(view)
    return out


def step_views(row: JobRow, tasks: Sequence[step_summary.StepTask]) -> list[StepSummaryView]:
    """The steps of the job's latest run, summarised from its ``tasks``."""
    found = step_summary.job_steps(
        tasks,
        waiting=row.state is JobState.PENDING,
        start_time=row.start_time,
        batch=batch_started(row.request),
        allocation=holds_allocation(row.request),
    )
    return [StepSummaryView(**step_summary.summary_record(s)) for s in found]


def job_view(
    row: JobRow,
    tasks: Sequence[TaskRow],
    restarts: int | None = None,
    steps: list[StepSummaryView] | None = None,
    *,
    listed: bool = False,
) -> JobView:
    """What the API shows of a stored job: its row, with ``tasks``, its ``restarts`` (None:
    not counted) and its ``steps`` summarised (None: not asked for); ``listed``: a listing's
    view, its command cut at :data:`LISTED_COMMAND` characters."""
    mail_type, mail_user = stored_mail(row.request.get("notify"), row.user)
    size = job_size(row.request)
    run = run_fields(row, LISTED_COMMAND if listed else None)
    return JobView(
        id=row.id,
        name=row.name,
        user=row.user,
        tenant=row.tenant,
        queue=row.queue,
        type=row.type,
        state=row.state.value,
        phase=row.phase,
        exit_code=row.exit_code,
        reason=row.reason,
        priority=row.priority,
        qos=_text_or_none(row.request.get("qos")),
        time_limit_s=_number_or_none(row.request.get("walltime_s")),
        mail_type=mail_type,
        mail_user=mail_user,
        comment=_text_or_none(row.request.get("comment")) or "",
        deadline=_number_or_none(row.request.get("deadline")),
        begin_time=_number_or_none(row.request.get("begin_time")),
        licenses=_licenses(row.request.get("licenses")),
        dependencies=_dependencies(row.request.get("dependencies")),
        workdir=run.workdir,
        output_file=run.output_file,
        error_file=run.error_file,
        command=run.command,
        nodes=list(row.nodes),
        cpus=size.cpus,
        gpus=size.gpus,
        min_nodes=size.min_nodes,
        accelerators=size.accelerators,
        cpus_per_task=size.cpus_per_task,
        pool=row.pool,
        energy_kwh=None if row.energy_j is None else row.energy_j / 3.6e6,
        energy_measured_kwh=None
        if row.energy_measured_j is None
        else row.energy_measured_j / 3.6e6,
        submit_time=row.submit_time,
        start_time=row.start_time,
        end_time=row.end_time,
        array_parent=row.array_parent,
        components=stored_components(row.request),
        seq=row.seq,
        batch=batch_started(row.request),
        allocation=holds_allocation(row.request),
        restarts=restarts,
        steps=steps,
        tasks=[
            TaskView(
                task_id=t.task_id,
                node=t.node or "",
                state=t.state.value,
                exit_code=t.exit_code,
                reason=t.reason or "",
                start_time=t.start_time,
                end_time=t.end_time,
                group=t.group,
                step_id=t.step_id,
                step_tasks=t.step_tasks,
                step_name=t.step_name,
                cpu_seconds=t.cpu_seconds,
                max_rss_bytes=t.max_rss_bytes,
                gpu_indices=[int(d[4:]) for d in t.devices if d.startswith("gpu:")],
                external_id=t.external_id,
            )
            for t in tasks
        ],
    )
