"""The ``fusesched`` console script.

Client commands (``submit``, ``jobs``, ``show``…) are run through a command table that holds
only them, so a submission does not import the simulator, NumPy and the policies first: a
scripted loop of ``fusesched submit`` calls starts several times faster. Everything else
(and ``--help``) goes through the full command table in :mod:`fusesched.cli.main`.
"""

from __future__ import annotations

import sys

CLIENT_COMMANDS = frozenset(
    {
        "submit",
        "sbatch",
        "jobs",
        "show",
        "eff",
        "logs",
        "cancel",
        "hold",
        "release",
        "requeue",
        "update",
        "nodes",
        "drain",
        "undrain",
        "queues",
        "token",
    }
)


#: The name in usage lines, also when run as ``python -m fusesched`` (as the native front
#: hands over: src/fusesched/cli/front.c).
PROG = "fusesched"


#: Commands with a quick path that needs no command framework (see :mod:`fusesched.cli.fast`).
FAST_COMMANDS = frozenset({"submit", "sbatch"})
#: Options that leave the quick path to the full command (``--test-only`` submits nothing:
#: it asks the controller when the jobs would start).
SLOW_OPTIONS = frozenset({"--help", "-h", "--test-only"})


def main() -> None:
    args = sys.argv[1:]
    if args and args[0] in FAST_COMMANDS and not SLOW_OPTIONS & set(args):
        from fusesched.cli.fast import run

        sys.exit(run(args[0], args[1:]))
    if len(sys.argv) > 1 and sys.argv[1] in CLIENT_COMMANDS:
        import typer

        from fusesched.cli.live import register_clients

        app = typer.Typer(name=PROG, add_completion=False, pretty_exceptions_enable=False)
        register_clients(app)
        app(prog_name=PROG)
        return
    from fusesched.cli.main import main as full

    full()
