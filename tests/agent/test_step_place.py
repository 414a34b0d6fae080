"""A step's placement options (agent/step_place.py): ``-w``, ``-x``, ``-r`` choose among the
job's nodes, ``-m`` deals the ranks out over them; an MPI step's mpirun maps them alike."""

from __future__ import annotations

import pytest

from fusesched.agent.step_args import parse_args
from fusesched.agent.step_mpi import mpirun_argv
from fusesched.agent.step_place import distribute, place_step
from fusesched.agent.step_plan import StepError, StepTask, place

HOSTS = [("node-a", 2), ("node-b", 2), ("node-c", 2)]
JOB = {"SLURM_NTASKS": "6", "SLURM_NNODES": "3"}


def layout(argv: list[str], environ: dict[str, str] = JOB) -> list[tuple[int, str, int]]:
    """(rank, node, local rank) of each task of ``srun ARGV true``."""
    tasks, _ = place_step(HOSTS, parse_args([*argv, "true"], {}), environ)
    assert [t.rank for t in tasks] == list(range(len(tasks)))
    return [(t.rank, t.node, t.local_rank) for t in tasks]


def nodes(argv: list[str], environ: dict[str, str] = JOB) -> list[str]:
    return [node for _, node, _ in layout(argv, environ)]


def test_without_placement_options_as_before() -> None:
    assert nodes(["-n", "3"]) == ["node-a", "node-b", "node-c"]
    assert nodes([]) == ["node-a", "node-a", "node-b", "node-b", "node-c", "node-c"]


def test_nodelist_runs_on_the_nodes_it_names() -> None:
    assert nodes(["-n", "2", "-w", "node-c"]) == ["node-c", "node-c"]
    assert nodes(["-w", "node-b,node-c", "-n", "2"]) == ["node-b", "node-c"]
    assert nodes(["-w", "node-c,node-a", "-n", "4"]) == ["node-a"] * 2 + ["node-c"] * 2
    assert nodes(["-w", "node-b"], {"SLURM_NTASKS": "2", "SLURM_NNODES": "3"}) == ["node-b"] * 2
    assert nodes(["-w", "node-a,node-b", "-n", "1"]) == ["node-a"]  # (fewer tasks: fewer nodes)
    # -N more than it names: the job's next nodes too
    assert nodes(["-w", "node-c", "-N", "2", "-n", "2"]) == ["node-c", "node-a"]


def test_exclude_and_relative_leave_nodes_out() -> None:
    assert nodes(["-x", "node-a", "-n", "2"]) == ["node-b", "node-c"]
    assert nodes(["-x", "node-a,node-z", "-n", "4"]) == ["node-b", "node-b", "node-c", "node-c"]
    assert nodes(["-r", "1", "-n", "2"]) == ["node-b", "node-c"]
    assert nodes(["-r", "2", "-N", "1", "-n", "2"]) == ["node-c", "node-c"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-w", "node-z"], "node-z is not a node of this job"),
        (["-w", "node-a", "-x", "node-a"], "both name node-a"),
        (["-x", "node-a,node-b,node-c"], "leaves none"),
        (["-r", "3"], "numbered from 0"),
        (["-w", "node-a,node-b", "-N", "1"], "give -N 2 or more"),
        (["-w", "node-a", "-n", "3"], "cannot place 3 tasks"),
    ],
)
def test_placements_that_cannot_be_say_why(argv: list[str], message: str) -> None:
    with pytest.raises(StepError, match=message):
        layout(argv)


def test_cyclic_deals_the_ranks_round_the_nodes() -> None:
    assert layout(["-n", "4", "-N", "2", "-m", "cyclic"]) == [
        (0, "node-a", 0),
        (1, "node-b", 0),
        (2, "node-a", 1),
        (3, "node-b", 1),
    ]
    # a node with fewer tasks is passed over once it has them all
    assert nodes(["-n", "5", "-m", "cyclic"]) == [
        "node-a", "node-b", "node-c", "node-a", "node-b"
    ]  # fmt: skip
    assert nodes(["-n", "4", "-N", "2", "-m", "block"]) == ["node-a"] * 2 + ["node-b"] * 2


def test_plane_deals_them_n_at_a_time() -> None:
    hosts = [("a", 4), ("b", 4)]
    tasks, _ = place(hosts, 7, None, None)
    assert [t.node for t in distribute(tasks, "plane=2")] == list("aabbaab")
    assert [t.node for t in distribute(tasks, "plane=8")] == list("aaaabbb")


def test_an_mpi_steps_ranks_follow_the_distribution() -> None:
    def mapping(how: str) -> str:
        tasks, _ = place([("a", 2), ("b", 2)], 4, 2, None)
        argv = mpirun_argv(distribute(tasks, how), [], False, ["app"])
        assert argv[argv.index("--host") + 1] == "a:2,b:2"
        return argv[argv.index("--map-by") + 1]

    assert mapping("block") == "slot"
    assert mapping("cyclic") == "node"


def test_distribute_keeps_each_nodes_count_and_local_ranks() -> None:
    tasks = [StepTask(r, "a" if r < 3 else "b", 0 if r < 3 else 1, r % 3, 3) for r in range(6)]
    dealt = distribute(tasks, "cyclic")
    assert [(t.node, t.local_rank, t.local_size) for t in dealt] == [
        ("a", 0, 3), ("b", 0, 3), ("a", 1, 3), ("b", 1, 3), ("a", 2, 3), ("b", 2, 3)
    ]  # fmt: skip
