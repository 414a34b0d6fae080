"""``fusesched run --pty`` through a controller crash (docs/SUBMIT.md, "Interactive jobs"): the
controller is SIGKILLed and started again on its data while a shell runs on a node; the
agent keeps the terminal, reads what the shell writes meanwhile, and the restarted
controller relays it again once the node has reported the task; run says the controller is
away and back, what was typed meanwhile reaches the shell, and the exit code is the shell's."""

from __future__ import annotations

from .test_recovery import Crashable, crashable
from .test_run_pty_live import PROMPT, Typist, prompted

__all__ = ["crashable"]  # (the fixture, for this module's tests)


def test_a_terminal_lives_through_a_controller_restart(crashable: Crashable) -> None:
    typist = prompted(Typist(crashable, "--pty", "bash", "--norc", "-i"))
    try:
        typist.type("echo before-$((6*7))\r")
        typist.read_until(b"before-42")
        typist.read_until(PROMPT)
        typist.type("(sleep 0.5; echo during-$((3*3))) &\r")  # (written while it is away)
        typist.read_until(PROMPT)

        crashable.kill_controller()
        typist.read_until(b"the controller cannot be reached")
        typist.type("echo typed-$((2*8))\r")  # (typed while it is away)
        crashable.start_controller()
        shown = typist.read_until(b"typed-16", 60)
        assert b"during-9" in shown and b"the controller answers again" in shown, shown

        typist.type("echo after-$((5*5)); exit 7\r")
        code, rest = typist.finish()
        assert b"after-25" in rest and code == 7, rest
    finally:
        typist.kill()
