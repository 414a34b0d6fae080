"""Small example workloads shipped with fusesched (used by ``fusesched up --demo`` and tests)."""

from pathlib import Path

EXAMPLES = Path(__file__).parent
