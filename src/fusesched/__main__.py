"""``python -m fusesched`` is the ``fusesched`` command."""

from fusesched.cli.entry import main

main()
