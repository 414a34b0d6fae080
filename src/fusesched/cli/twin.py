"""``fusesched twin``: snapshot the live cluster, replay it, compare what-if scenarios, plan
capacity and check the twin against what really happened (docs/TWIN.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from fusesched.cli.entry import HELP_MARKUP
from fusesched.cli.seeds import SeedsError, parse_seeds

if TYPE_CHECKING:
    from fusesched.twin.scenario import Scenario
    from fusesched.twin.snapshot import Snapshot

twin_app = typer.Typer(
    rich_markup_mode=HELP_MARKUP,
    name="twin",
    help="The digital twin: snapshot the cluster, replay it under what-if scenarios, plan "
    "capacity (docs/TWIN.md).",
    no_args_is_help=True,
)

SnapshotArg = Annotated[Path, typer.Argument(help="A snapshot file (fusesched twin snapshot).")]
WorkersOpt = Annotated[
    int | None,
    typer.Option("--workers", min=1, help="Processes for the sweep (default: one per core)."),
]
RayOpt = Annotated[
    str | None,
    typer.Option("--ray", help="Run the sweep on this Ray cluster (e.g. 127.0.0.1:6379) instead."),
]
SeedsOpt = Annotated[
    str | None,
    typer.Option("--seeds", help="Seeds, e.g. 0,1,2 or 0-4 (default: each scenario's own)."),
]


def _fail(message: str, code: int = 2) -> NoReturn:
    from fusesched.cli.live import err

    err.print(f"[red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


def _seeds(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return parse_seeds(text)
    except SeedsError as exc:
        _fail(str(exc))


def _yaml_file(path: Path | None, what: str) -> dict[str, Any] | None:
    if path is None:
        return None
    from fusesched.yamlfile import YamlFileError, read_yaml

    try:
        data = read_yaml(path, what)
    except YamlFileError as exc:
        _fail(str(exc))
    if not isinstance(data, dict):
        _fail(f"{path}: the {what} must be a mapping")
    return data


def _load_snapshot(path: Path) -> tuple[Snapshot, bytes]:
    from fusesched.twin.snapshot import SnapshotError, loads

    try:
        data = path.read_bytes()
    except OSError as exc:
        _fail(f"cannot read the snapshot {path}: {exc.strerror}")
    try:
        return loads(data, str(path)), data
    except SnapshotError as exc:
        _fail(str(exc))


def _load_scenarios(paths: list[Path]) -> list[Scenario]:
    from fusesched.twin.scenario import ScenarioError, load_scenario

    out = []
    for path in paths:
        try:
            out.append(load_scenario(path))
        except ScenarioError as exc:
            _fail(str(exc))
    names = [s.name for s in out]
    if len(set(names)) != len(names):
        _fail(f"scenario names must differ: {', '.join(names)}")
    return out


@twin_app.command()
def snapshot(
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Snapshot file (.json or .json.gz).")
    ] = Path("snapshot.json.gz"),
    data_dir: Annotated[
        Path, typer.Option("--data-dir", help="The controller's data folder (its SQLite store).")
    ] = Path("fusesched-data"),
    db: Annotated[
        str | None, typer.Option("--db", help="Database URL instead (postgresql+psycopg://…).")
    ] = None,
    queue_order: Annotated[str, typer.Option(help="The controller's queue order.")] = "fcfs",
    backfill: Annotated[str, typer.Option(help="The controller's backfill.")] = "easy",
    placement: Annotated[str, typer.Option(help="The controller's placement.")] = "best-fit",
    runtime_prediction: Annotated[
        str, typer.Option("--runtime-prediction", help="The controller's run-time prediction.")
    ] = "none",
    tenancy: Annotated[
        Path | None, typer.Option(help="The controller's tenancy file (queues, quotas, QoS).")
    ] = None,
    power: Annotated[
        Path | None, typer.Option("--power", help="The controller's power-saving file.")
    ] = None,
) -> None:
    """Export the cluster's nodes, policies, quotas and job history into one file."""
    from fusesched.controller.server import sqlite_url
    from fusesched.policies.registry import CoreConfig, PolicyError
    from fusesched.store import NoStore, Store
    from fusesched.twin.snapshot import SnapshotError, save, take_snapshot

    try:
        core = CoreConfig(
            queue_order=queue_order,
            backfill=backfill,
            placement=placement,
            runtime_prediction=runtime_prediction,
        )
    except PolicyError as exc:
        _fail(str(exc))
    tenancy_data = _yaml_file(tenancy, "tenancy configuration")
    power_data = _yaml_file(power, "power-saving configuration")
    if db is None:
        if not (data_dir / "fusesched.db").is_file():
            _fail(f"no store in {data_dir} (fusesched.db); give --data-dir or --db")
        db = sqlite_url(data_dir)
    try:
        with Store.existing(db) as store:  # a snapshot creates no database
            snap = take_snapshot(
                store, core, tenancy=tenancy_data, power=power_data, source=str(db)
            )
    except NoStore as exc:
        _fail(str(exc))
    except Exception as exc:  # a store that cannot be read: say why, no traceback
        _fail(f"cannot read the store {db}: {exc}")
    try:
        snap.core_config()
        save(snap, output)
    except SnapshotError as exc:
        _fail(str(exc))
    typer.echo(f"{output}: {len(snap.nodes)} nodes, {len(snap.jobs)} jobs")


def _print_results(results: list[Any], as_json: bool) -> None:
    from rich.markdown import Markdown

    from fusesched.cli.consoles import make_console
    from fusesched.twin.report import table, tenant_table

    if as_json:
        typer.echo(json.dumps([r.as_dict() for r in results], indent=1))
        return
    console = make_console()
    console.print(Markdown(table(results)))
    console.print(Markdown(tenant_table(results)))


@twin_app.command("run")
def run_cmd(
    snapshot_path: SnapshotArg,
    scenario: Annotated[
        Path | None, typer.Argument(help="A what-if scenario (YAML); none: as it is.")
    ] = None,
    seeds: SeedsOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    workers: WorkersOpt = None,
    reserve: Annotated[
        list[str] | None,
        typer.Option(
            "--reservation",
            help="Also make this advance reservation: NAME:NODES:START:END[:users=A,B]"
            "[:tenants=T], NODES a host list (n[1-4]), START and END seconds after the first "
            "submission (END also +SECONDS); repeatable. (A scenario's reservations.add "
            "takes dates.)",
        ),
    ] = None,
    unreserve: Annotated[
        list[str] | None,
        typer.Option(
            "--no-reservation",
            help="Replay without this reservation of the snapshot (NAME); repeatable.",
        ),
    ] = None,
) -> None:
    """Replay a snapshot in the simulator; prints the twin's metrics beside the observed ones."""
    from fusesched.twin.parallel import Task, run_all
    from fusesched.twin.runner import observed
    from fusesched.twin.scenario import Scenario, ScenarioError
    from fusesched.twin.snapshot import SnapshotError

    snap, data = _load_snapshot(snapshot_path)
    chosen = _load_scenarios([scenario])[0] if scenario is not None else Scenario(name="twin")
    if reserve or unreserve:
        chosen = _with_reservations(chosen, reserve or [], unreserve or [])
    tasks = [
        Task(chosen, s, source=str(scenario or "twin")) for s in (_seeds(seeds) or chosen.seeds)
    ]
    try:
        live = observed(snap)
        results = [live, *run_all(data, tasks, workers=workers)]
    except (ScenarioError, SnapshotError) as exc:
        _fail(str(exc))
    _print_results(results, as_json)


def _with_reservations(scenario: Scenario, add: list[str], remove: list[str]) -> Scenario:
    """``scenario`` with the command line's reservations added and removed."""
    from fusesched.sim.reservations import parse_reservation
    from fusesched.twin.scenario import AddReservation, ReservationChanges

    made: list[AddReservation] = []
    for text in add:
        try:
            res = parse_reservation(text)
        except ValueError as exc:
            _fail(f"--reservation: {exc}")
        made.append(
            AddReservation(
                name=res.name,
                nodes=list(res.nodes),
                start_s=res.start,
                end_s=res.end,
                users=list(res.users),
                tenants=list(res.tenants),
            )
        )
    old = scenario.reservations
    changes = ReservationChanges(remove=[*old.remove, *remove], add=[*old.add, *made])
    return scenario.model_copy(update={"reservations": changes})


@twin_app.command()
def compare(
    snapshot_path: SnapshotArg,
    scenarios: Annotated[list[Path], typer.Argument(help="Scenario files (YAML).")],
    out: Annotated[Path, typer.Option("--out", help="Report folder.")] = Path("twin-report"),
    seeds: SeedsOpt = None,
    workers: WorkersOpt = None,
    ray_address: RayOpt = None,
) -> None:
    """Run scenarios side by side; writes OUT/report.md with PNG plots."""
    from fusesched.twin.parallel import ParallelError, Task, run_all
    from fusesched.twin.report import write_compare
    from fusesched.twin.scenario import ScenarioError
    from fusesched.twin.snapshot import SnapshotError

    snap, data = _load_snapshot(snapshot_path)
    chosen = _load_scenarios(scenarios)
    picked = _seeds(seeds)
    tasks = [
        Task(s, seed, source=str(path))
        for s, path in zip(chosen, scenarios, strict=True)
        for seed in (picked or s.seeds)
    ]
    try:
        results = run_all(data, tasks, workers=workers, ray_address=ray_address)
    except (ScenarioError, SnapshotError, ParallelError) as exc:
        _fail(str(exc))
    notes = [
        f"Snapshot `{snapshot_path.name}`: {len(snap.nodes)} nodes, {len(snap.jobs)} jobs.",
        "",
        *[
            f"- **{s.name}**: {s.description or path.name}"
            for s, path in zip(chosen, scenarios, strict=True)
        ],
    ]
    path = write_compare(results, out, "What-if comparison", notes)
    _print_results(results, False)
    typer.echo(f"report: {path}")


@twin_app.command()
def plan(
    snapshot_path: SnapshotArg,
    target: Annotated[
        float, typer.Option("--p95-below", min=0, help="Target p95 wait in seconds.")
    ],
    like: Annotated[
        str | None, typer.Option("--like", help="Add copies of this node (the node type).")
    ] = None,
    gpu_model: Annotated[
        str | None,
        typer.Option("--gpu-model", help="Add nodes like the first with this GPU model label."),
    ] = None,
    queue: Annotated[
        str | None, typer.Option("--queue", help="Whose p95 wait (default: all jobs).")
    ] = None,
    base: Annotated[
        Path | None, typer.Option("--base", help="Scenario to start from (YAML).")
    ] = None,
    seeds: Annotated[
        str,
        typer.Option(
            "--seeds", help="Seeds, e.g. 0,1,2 or 0-4: each size is replayed once per seed."
        ),
    ] = "0,1,2",
    max_add: Annotated[int, typer.Option("--max-add", min=1, help="Most nodes to add.")] = 256,
    out: Annotated[Path, typer.Option("--out", help="Report folder.")] = Path("twin-capacity"),
    workers: WorkersOpt = None,
    ray_address: RayOpt = None,
) -> None:
    """How many nodes of a type keep a queue's p95 wait below a target? Writes OUT/capacity.md."""
    from fusesched.model.node import LABEL_GPU_MODEL
    from fusesched.twin.capacity import CapacityError, Question, run_question
    from fusesched.twin.parallel import ParallelError
    from fusesched.twin.report import capacity_markdown, write_capacity
    from fusesched.twin.scenario import Scenario, ScenarioError
    from fusesched.twin.snapshot import SnapshotError

    snap, data = _load_snapshot(snapshot_path)
    start = _load_scenarios([base])[0] if base is not None else Scenario(name="now")
    if like is None and gpu_model is None:
        _fail("name the node type: --like NODE or --gpu-model MODEL")
    if like is not None and gpu_model is not None:
        _fail("give one of --like or --gpu-model, not both")
    try:
        question = Question(
            target_s=target,
            like=like,
            match={LABEL_GPU_MODEL: gpu_model} if gpu_model is not None else None,
            queue=queue,
            seeds=tuple(_seeds(seeds) or (0,)),
            max_add=max_add,
        )
        answer = run_question(start, question, data, workers=workers, ray_address=ray_address)
    except (CapacityError, ScenarioError, SnapshotError, ParallelError) as exc:
        _fail(str(exc))
    what = f"nodes like {like}" if like else f"{gpu_model} nodes"
    notes = [f"Snapshot `{snapshot_path.name}`: {len(snap.nodes)} nodes, {len(snap.jobs)} jobs."]
    path = write_capacity(answer, out, "Capacity plan", what, notes)
    typer.echo(capacity_markdown(answer, what))
    typer.echo(f"report: {path}")
    if answer.added is None:
        raise typer.Exit(1)


@twin_app.command()
def validate(
    snapshot_path: SnapshotArg,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Replay a snapshot and report how far the twin's start times and metrics are from what
    really happened."""
    from fusesched.twin.scenario import ScenarioError
    from fusesched.twin.snapshot import SnapshotError
    from fusesched.twin.validate import markdown
    from fusesched.twin.validate import validate as check

    snap, _ = _load_snapshot(snapshot_path)
    try:
        result, _, _ = check(snap)
    except (ScenarioError, SnapshotError) as exc:
        _fail(str(exc))
    if as_json:
        typer.echo(json.dumps(result.as_dict(), indent=1))
    else:
        typer.echo(markdown(result))


def register(app: typer.Typer) -> None:
    app.add_typer(twin_app, rich_help_panel="Simulate")
