"""``fusesched run --pty`` whose shell ends while the controller is down (docs/SUBMIT.md,
"Interactive jobs"): the agent keeps what the shell wrote last, and once the controller is
back run shows it, then exits with the shell's code."""

from __future__ import annotations

import time

from .test_recovery import Crashable, crashable
from .test_run_pty_live import Typist, prompted

__all__ = ["crashable"]  # (the fixture, for this module's tests)


def test_a_shell_that_ends_while_the_controller_is_away_shows_its_last_words(
    crashable: Crashable,
) -> None:
    typist = prompted(Typist(crashable, "--pty", "bash", "--norc", "-i"))
    try:
        typist.type("sleep 0.5; echo last-$((4*4)); exit 5\r")
        typist.read_until(b"exit 5")  # (the line's echo: the shell has it)
        crashable.kill_controller()
        deadline = time.monotonic() + 20
        while any(agent.client.runtime.running() for agent in crashable.agents):
            assert time.monotonic() < deadline, "the shell did not end"
            time.sleep(0.05)
        crashable.start_controller()
        code, rest = typist.finish(60)
        assert b"last-16" in typist.seen + rest and code == 5, typist.seen + rest
    finally:
        typist.kill()
