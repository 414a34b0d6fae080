"""``fusesched train-policy``: train a learned queue order in the simulator and save it.

The saved JSON file is used without retraining as ``--policy learned:FILE.json`` (the shipped
one is ``--policy learned``). Training and the model are in :mod:`fusesched.policies.learned`;
docs/LEARNED_POLICY.md explains the objective and the results. Heavy modules are imported
inside the command, so other commands start as quickly as before.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from fusesched.cli.consoles import make_console

console = make_console()
err = make_console(stderr=True)

#: ``--traces selection``: the SWF traces the project selects policies on (never the
#: evaluation traces Lublin-1/2, SDSC-SP2 and HPC2N), relative to ../shared — the six whose
#: jobs state their requested time (bench/hpc_default.py), so that a prediction never sees the
#: run time the protocol's clean-up puts where a request is missing.
SELECTION_TRACES = tuple(
    "traces/pwa-swf/" + name
    for name in (
        "CTC-SP2-1996-3.1-cln.swf.gz",
        "KTH-SP2-1996-2.1-cln.swf.gz",
        "SDSC-DS-2004-2.1-cln.swf.gz",
        "Sandia-Ross-2001-1.1-cln.swf.gz",
        "CEA-Curie-2011-2.1-cln.swf.gz",
        "RICC-2010-2.swf.gz",
    )
)
#: File-name tags of the traces learned policies are evaluated on.
EVALUATION_TAGS = ("SDSC-SP2", "HPC2N", "LUBLIN_256")


def _fail(message: str) -> NoReturn:
    err.print(f"[red]error:[/] {message}")
    raise typer.Exit(2)


def resolve_traces(text: str) -> list[Path]:
    """Comma-separated SWF files or short names (those of ``fusesched simulate``, e.g.
    ``sdsc-sp2``), or ``selection`` for :data:`SELECTION_TRACES`."""
    from fusesched.cli.simulate import KNOWN_TRACES, shared_dir

    paths: list[Path] = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        if item == "selection" or (item in KNOWN_TRACES and not Path(item).exists()):
            shared = shared_dir()
            if shared is None:
                _fail(f"--traces {item} needs ../shared (the traces), which is absent here")
            if item == "selection":
                paths.extend(shared / rel for rel in SELECTION_TRACES)
            else:
                paths.append(shared / KNOWN_TRACES[item])
            continue
        path = Path(item).expanduser()
        if not path.is_file():
            names = ", ".join(["selection", *KNOWN_TRACES])
            _fail(f"no such trace file: {item} (or use one of: {names})")
        paths.append(path)
    if not paths:
        _fail("--traces needs at least one SWF file (or: selection)")
    return paths


def check_out(out: Path) -> None:
    """Fail before training (which takes minutes) when ``out`` cannot be written: a folder, a
    file as its folder, a folder that cannot be made or written to."""
    import os

    if out.is_dir():
        _fail(f"cannot write {out}: it is a folder (name the JSON file, e.g. {out}/policy.json)")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        _fail(f"cannot write {out}: a file stands where its folder should be")
    except OSError as exc:
        _fail(f"cannot write {out}: {exc.strerror or exc}")
    if not os.access(out.parent, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        _fail(f"cannot write {out}: permission denied")


def train_policy(
    traces: Annotated[
        str,
        typer.Option(
            "--traces",
            help="SWF traces to train on, comma-separated (files or the short names of "
            "`fusesched simulate`), or 'selection' (the six selection traces in ../shared; "
            "never the evaluation traces).",
        ),
    ],
    out: Annotated[Path, typer.Option("--out", help="Where to write the policy (JSON).")],
    lam: Annotated[
        float,
        typer.Option(
            "--lambda",
            min=0.0,
            help="Weight of energy in the objective: J = mean log(bsld/bsld_heuristic) + "
            "λ·mean log(kWh/kWh_heuristic). 0: slowdown only (fast; no power model).",
        ),
    ] = 0.0,
    budget: Annotated[
        int, typer.Option("--budget", min=1, help="Candidate policies to evaluate.")
    ] = 96,
    population: Annotated[
        int, typer.Option("--population", min=2, help="Candidates per generation.")
    ] = 12,
    sequences: Annotated[
        int, typer.Option("--sequences", min=1, help="Sampled job sequences per trace.")
    ] = 2,
    length: Annotated[
        int, typer.Option("--length", min=2, help="Jobs per sampled sequence.")
    ] = 1024,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the optimiser.")] = 0,
    sequence_seed: Annotated[
        int,
        typer.Option(
            "--sequence-seed",
            help="Seed of the sequence starts (the RLScheduler evaluation uses 1).",
        ),
    ] = 2,
    skip_jobs: Annotated[
        int,
        typer.Option(
            "--skip-jobs",
            min=0,
            help="Draw sequences only after each trace's first N jobs (10000 keeps training "
            "apart from the protocol's sequences, which lie in the first 10,000 jobs).",
        ),
    ] = 0,
) -> None:
    """Train a learned queue order in the simulator and save it as JSON.

    The policy scores each waiting job by a linear function of log estimate (predicted run
    time), log size, log wait and slowdown-so-far, and is trained with the cross-entropy
    method against the `heuristic` preset on sampled 1,024-job sequences of the given traces.
    Use the result with `fusesched simulate --policy learned:FILE.json`.
    """
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from fusesched.policies.learned.model import save_model
    from fusesched.policies.learned.train import (
        TrainSpec,
        git_commit,
        train,
        training_sequences,
    )
    from fusesched.traces.swf import TraceFormatError

    paths = resolve_traces(traces)
    check_out(out)
    for path in paths:
        if any(tag in path.name.upper() for tag in EVALUATION_TAGS):
            err.print(
                f"[yellow]warning:[/] {path.name} is an evaluation trace of "
                "docs/LEARNED_POLICY.md; a policy trained on it cannot be judged on it"
            )
    try:
        seqs = training_sequences(
            paths, sequences, seed=sequence_seed, length=length, skip=skip_jobs
        )
    except (TraceFormatError, OSError) as exc:
        _fail(str(exc))
    except ValueError as exc:  # too few jobs for the sequence length
        _fail(f"cannot sample sequences: {exc}")
    command = "fusesched train-policy " + " ".join(shlex.quote(a) for a in sys.argv[2:])
    spec = TrainSpec(
        lam=lam,
        budget=budget,
        population=population,
        seed=seed,
        extra_meta={
            "git_commit": git_commit(),
            "command": command,
            "sequence_seed": sequence_seed,
            "skip_jobs": skip_jobs,
        },
    )
    progress = Progress(
        TextColumn("[bold]training"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("best J {task.fields[best]}"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    )
    with progress:
        task = progress.add_task("train", total=budget, best="–")

        def advance(done: int, total: int, best: float) -> None:
            progress.update(task, completed=done, best=f"{best:+.4f}")

        model = train(seqs, spec, advance)
    try:
        save_model(model, out)
    except OSError as exc:
        _fail(f"cannot write {out}: {exc}")
    best = model.meta["training"]["best_J"]
    terms = ", ".join(f"{w:+.3f}" for w in model.weights)
    console.print(f"trained on {len(seqs)} sequences of {len(paths)} traces; best J {best:+.4f}")
    console.print(f"weights [{terms}]")
    console.print(f"wrote {out} (use: --policy learned:{out})")


def register(app: typer.Typer) -> None:
    app.command("train-policy", rich_help_panel="Simulate")(train_policy)
