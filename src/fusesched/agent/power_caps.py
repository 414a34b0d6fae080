"""Power caps of QoS tiers, applied on the node through the site's own commands.

A job's QoS tier may cap its power (``gpu_watts``, ``cpu_mhz``; docs/ENERGY.md); the controller
sends the caps with each task, and the agent runs the command template its configuration gives
for that kind (``power_hooks``) before the task starts, and the reset template after it ends.
Nothing is hard-wired: ``nvidia-smi -i {gpu} -pl {value}``, ``cpupower -c {cpus}
frequency-set -u {value}MHz`` or a site script are all just argv templates. Templates are
filled word by word and run without a shell. A hook that fails does not stop the task; the
failure is noted in the task's start report (so the user sees the cap was not applied).
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from fusesched.agent.config import PowerHookConfig
from fusesched.agent.task_env import visible_gpus
from fusesched.api.wire import TaskLaunch

log = logging.getLogger("fusesched.agent.power")


def _fill(template: Sequence[str], values: Mapping[str, str]) -> list[str]:
    out = []
    for word in template:
        for key, value in values.items():
            word = word.replace("{" + key + "}", value)
        out.append(word)
    return out


def _value(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else f"{number:g}"


class PowerCaps:
    """The node's power hooks (``AgentConfig.power_hooks``)."""

    def __init__(self, hooks: Mapping[str, PowerHookConfig]) -> None:
        self.hooks = dict(hooks)

    def _commands(self, launch: TaskLaunch, reset: bool) -> list[tuple[list[str], float]]:
        commands = []
        for kind, cap in sorted(launch.power_cap.items()):
            hook = self.hooks.get(kind)
            if hook is None:
                continue
            template = hook.reset if reset else hook.apply
            if template is None:
                continue
            gpus = visible_gpus(launch)  # (a batch script's: all its job's on the node)
            values = {
                "value": _value(cap),
                "task": launch.task_id,
                "gpus": ",".join(str(g) for g in gpus),
                "cpus": ",".join(str(c) for c in launch.cpu_ids),
            }
            per_gpu = any("{gpu}" in word for word in template)
            for gpu in gpus if per_gpu else [None]:
                filled = values | ({"gpu": str(gpu)} if gpu is not None else {})
                commands.append((_fill(template, filled), hook.timeout_s))
        return commands

    def apply(self, launch: TaskLaunch) -> list[str]:
        """Run the apply hooks for the task's caps; problems, as notes for its report."""
        return self._run(self._commands(launch, reset=False))

    def reset(self, launch: TaskLaunch) -> list[str]:
        return self._run(self._commands(launch, reset=True))

    @staticmethod
    def _run(commands: list[tuple[list[str], float]]) -> list[str]:
        """Run the commands at once (one per GPU, say), so the agent waits at most one hook's
        timeout, not one per GPU, before it starts or reports the task."""
        if not commands:
            return []
        with ThreadPoolExecutor(max_workers=min(16, len(commands))) as pool:
            results = list(pool.map(lambda c: _run_one(*c), commands))
        notes = [note for note in results if note]
        for note in notes:
            log.warning("%s", note)
        return notes


def _run_one(argv: list[str], timeout: float) -> str:
    """One hook; its problem as a note ("" when it went well)."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:  # (its text holds the argv, which may hold secrets)
        return f"power hook {argv[0]} timed out after {timeout:g} s"
    except OSError as exc:
        return f"power hook {argv[0]} failed: {exc.strerror}"
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip()[:200]
        return f"power hook {argv[0]} exited {done.returncode}: {detail}"
    return ""
