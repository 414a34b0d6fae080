"""The controller's side of the exchange with the node agents: a node registering
(:func:`register`), its heartbeats with their reports and the work sent back in the reply
(:func:`heartbeat`, a long poll), its agent saying it is stopping (:func:`leaving`), and what
a running job's helpers ask of it (mpirun's orteds: :func:`remote_launch`,
:func:`task_status`; which tasks may start and their launch: :mod:`.remote_tasks`). The API
layer reaches these through the :class:`~fusesched.controller.service.Controller` methods of
the same names.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from fusesched.api.wire import (
    Heartbeat,
    HeartbeatReply,
    KillTask,
    NodeInventory,
    TaskLaunch,
    TaskLimit,
    TaskState,
)
from fusesched.controller import (
    adoption,
    data,
    drains,
    endings,
    failures,
    late_exits,
    output_files,
    pty_tasks,
    recovery,
)
from fusesched.controller import probes as task_probes
from fusesched.controller.job_steps import STEP_ID_ENV
from fusesched.controller.pools import NodePool
from fusesched.controller.records import (
    LiveNode,
    NodeChangedError,
    UnknownJobError,
    UnknownNodeError,
    node_spec,
)
from fusesched.controller.remote_tasks import (
    check_remote_node,
    check_step_runs,
    launch_remote,
    running_job,
)
from fusesched.controller.step_gpus import helper_gpus
from fusesched.model.events import NodeAdded, NodeStateChanged
from fusesched.model.node import NodeState
from fusesched.power.saving import PowerState
from fusesched.submit.errors import SubmitError

if TYPE_CHECKING:
    from fusesched.controller.service import Controller

log = logging.getLogger(__name__)

#: A launch sent in reply to a quick report is not taken for lost, for this long, when a full
#: beat does not list it: the agent's two threads send beats independently, so a full beat may
#: list the node's tasks before the launch started, and arrive after it was sent. Past this, a
#: task its agent never reports (a reply lost on the way) is lost as usual.
UNCONFIRMED_GRACE_S = 10.0

#: Why a node is down after its agent said it is stopping (:func:`leaving`).
AGENT_STOPPED = "agent stopped"

#: what an agent may call its node and give as its address: they name things in commands
#: (power-saving templates, mpirun's host list), so no option-like or template-like words;
#: ":" is kept for external pools' nodes (``<pool>:<node>``)
_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
_ADDRESS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.:%_-]{0,252}$")


def register(ctl: Controller, inventory: NodeInventory) -> None:
    """A node's agent (re)starts: a new node joins the core; a known one's tasks are gone."""
    _check_node_identity(inventory)
    now = ctl.clock()
    with ctl.lock:
        known = ctl.nodes.get(inventory.name)
        if known is None:
            spec = node_spec(inventory)
            node = LiveNode(inventory, spec, NodePool.of(inventory), now)
            node.drain = drains.stored_drain(ctl, inventory.name)  # outlives restarts
            ctl.nodes[inventory.name] = node
            late_exits.node_back(ctl, inventory)  # (tasks left dying before a restart)
            if adoption.holds(ctl, inventory.name):  # nothing new beside adopted tasks
                node.state = NodeState.DRAINING
                ctl.adopt_held.add(inventory.name)
            elif node.drain is not None:
                node.state = NodeState.DRAINING
            ctl.events.append(NodeAdded(spec, node.state))
        else:  # an agent restarted: whatever it ran is gone
            _check_unchanged(known, inventory)
            known.inventory = inventory
            known.last_seen = now
            known.left = False
            endings.lose_tasks(ctl, inventory.name, set(), "agent restarted", now)
            asleep = ctl.power is not None and ctl.power.state_of(inventory.name) in (
                PowerState.SUSPENDING,
                PowerState.SUSPENDED,
                PowerState.RESUMING,
            )
            back = NodeState.UP if known.drain is None else NodeState.DRAINING
            if known.state is not back and not asleep:  # power saving decides
                known.state = back
                ctl.events.append(NodeStateChanged(inventory.name, back, "back"))
                ctl.persist.node_state(inventory.name, back, now, "back")  # (its history)
        ctl.persist.node_registered(inventory, now, ctl.nodes[inventory.name].state)
        if ctl.power is not None:
            ctl.power.heard(ctl, inventory.name, registered=True, now=now)
        if known is None and ctl.adopt_held:
            adoption.on_register(ctl, inventory, now)
        if ctl.held and ctl.expected_nodes <= ctl.nodes.keys():
            recovery.release_held(ctl)
        if ctl.waiting:
            recovery.retry_waiting(ctl)
    ctl.wake()


def heartbeat(
    ctl: Controller,
    beat: Heartbeat,
    wait_s: float | None = None,
    launch: bool = False,
    signals: bool = True,
    probes: bool = True,
    outputs: bool = True,
    pty: bool = True,
) -> HeartbeatReply:
    """Take what an agent reports; the reply carries its work (launches, kills, running
    tasks' new time limits, datasets to stage).

    A full beat (``beat.running`` set) waits up to ``wait_s`` for work (a long poll). A
    quick report (``running`` None) gets work only when its agent says it takes some
    (``launch``); then, if it reported an exit, it waits (up to ``wait_s``) for the
    scheduling cycle that handles the exit, so the launch that takes the freed room comes
    back in the same exchange. Either kind of beat that reported an exit waits for that
    cycle, not for the whole long poll.

    ``signals``: the agent understands signals (its beats say ``signals=true``; agents in
    the controller's process do). An older agent's reply model refuses the fields, so its
    replies carry none: its launches go without their time-limit warning (logged), and
    signals on demand are refused for its tasks (the node's latest beat decides,
    ``LiveNode.takes_signals``).

    ``probes``: the agent runs liveness and readiness probes (``probes=true``); an older
    one's launches go without them (controller/probes.py).

    ``outputs``: the agent writes output files and starts batch scripts in the folder they
    were submitted from (``outputs=true``); an older one's launches go without them, as
    before (controller/output_files.py).

    ``pty``: the agent relays pseudo-terminals (``pty=true``, ``fusesched run --pty``); an
    older one's such launches fail to start (controller/pty_tasks.py).
    """
    now = ctl.clock()
    wait = ctl.config.long_poll_s if wait_s is None else wait_s
    quick = beat.running is None
    with ctl.work:
        node = ctl.nodes.get(beat.node)
        if node is None:
            raise UnknownNodeError(beat.node)
        node.last_seen = now
        node.takes_signals = signals
        fenced = failures.fence(ctl, beat) if not quick else 0
        if not quick:
            node.load = beat.load
        # back, and its stale tasks gone (a node whose agent left comes back by registering:
        # a beat sent before it left may arrive after)
        if node.state is NodeState.DOWN and not fenced and not node.left:
            failures.set_node_state(ctl, beat.node, NodeState.UP, "heartbeat", now)
            ctl.wake()
        if ctl.power is not None:
            ctl.power.heard(ctl, beat.node, registered=False, now=now)
        if beat.samples or beat.health is not None:
            failures.observe(ctl, beat, now)
        data.heard(ctl, beat)
        ctl.logs.heard(beat)  # (the tasks it speaks of: a log's end is not waited for forever)
        # a node speaks only for its own tasks: it can neither write another node's task
        # logs nor end another node's tasks
        for chunk in beat.logs:
            if ctl.on_node(chunk.task_id, beat.node):
                ctl.logs.write(chunk)
        for report in beat.reports:
            if ctl.on_node(report.task_id, beat.node):
                endings.task_report(ctl, report, now)
        if beat.ready:
            task_probes.heard(ctl, beat, now)
        if beat.running is not None:
            alive = set(beat.running) | {r.task_id for r in beat.reports}
            endings.lose_tasks(ctl, beat.node, alive, "lost by its agent", now, beat=True)
            for task_id in alive - ctl.tasks.keys() - ctl.finished.keys():
                node.kills.append(  # a stray from before a controller restart
                    KillTask(task_id=task_id, grace_s=ctl.config.grace_s, reason="unknown job")
                )
        # an exit reported (events to schedule): the next cycle may bring work
        ended = any(r.state is not TaskState.RUNNING for r in beat.reports)
        cycle = ctl.cycles + 1 if ended and ctl.events else None
        busy = node.has_work()
        if cycle is None or busy or wait <= 0 or (quick and not launch):
            ctl.persist.flush()  # what the beat reported is stored before it is answered
        # else the cycle this beat waits for writes it, in the same transaction as what the
        # cycle decides (the flush below covers a wait that ends first)
        if quick and not launch:
            # an agent that does not take work on quick reports starts work only from its
            # full beats, before it lists its live tasks again (else a task could look
            # lost in between)
            return HeartbeatReply()
        if not busy and wait > 0:
            if cycle is not None:
                # some pending events (checkpoints, sensor findings) do not wake the loop
                # themselves: the cycle this beat waits for must come now
                ctl.wake()
                ctl.cycle_waiters += 1
                node.cycle_waiters += 1
                try:
                    ctl.work.wait_for(
                        lambda: node.has_work() or ctl.cycles >= cycle or ctl.stopped.is_set(),
                        timeout=wait,
                    )
                finally:
                    ctl.cycle_waiters -= 1
                    node.cycle_waiters -= 1
                    ctl.work.notify_all()  # a long poll of this node may answer now
            elif not quick:
                # while a report of this node waits for its cycle, that report takes the
                # work the cycle brings (one exchange, not two, per turnover)
                ctl.work.wait_for(
                    lambda: (node.has_work() and not node.cycle_waiters) or ctl.stopped.is_set(),
                    timeout=wait,
                )
        if not pty:
            pty_tasks.refuse_older(ctl, beat.node, node, now)
        ctl.persist.flush()  # nothing to write unless the wait ended before the cycle did
        launches = node.outbox if probes else task_probes.without_probes(beat.node, node.outbox)
        if not outputs:
            launches = output_files.without_outputs(beat.node, launches)
        reply = HeartbeatReply(
            launch=launches if signals else _without_signals(beat.node, launches),
            kill=node.kills,
            limit=node.limits + _limits_again(ctl, node, beat),
            signal=node.signals if signals else [],
            stage=node.stage,
        )
        if node.signals and not signals:
            log.warning(
                "node %s's agent is too old to deliver signals: %d not sent",
                beat.node,
                len(node.signals),
            )
        for sent in node.outbox:
            task = ctl.tasks[sent.task_id][1]
            task.state = "delivered"
            # the agent's full beat may have listed its tasks before it started this one
            task.unconfirmed_until = now + UNCONFIRMED_GRACE_S if quick else 0.0
        node.outbox, node.kills, node.limits, node.stage = [], [], [], []
        node.signals = []
    return reply


def _limits_again(ctl: Controller, node: LiveNode, beat: Heartbeat) -> list[TaskLimit]:
    """A full beat's reply carries again the time limit of each of the node's running tasks
    whose limit was changed (``node.relimited``), so that a reply lost on the way cannot
    leave the agent with the old one (the agent takes the same limit twice as once). Tasks
    gone from the node are forgotten. Quick reports list no tasks: nothing for them."""
    if not node.relimited or beat.running is None:
        return []
    listed = set(beat.running)
    sent = {limit.task_id for limit in node.limits}  # (this reply has their newest already)
    again: list[TaskLimit] = []
    for task_id in sorted(node.relimited):
        found = ctl.tasks.get(task_id)
        if found is None or task_id not in listed:
            node.relimited.discard(task_id)
            continue
        if task_id in sent:
            continue
        walltime = found[1].launch.walltime_s
        if walltime is not None:  # (a task being stopped keeps what it has: harmless)
            again.append(TaskLimit(task_id=task_id, walltime_s=walltime))
    return again


def _without_signals(node: str, launches: list[TaskLaunch]) -> list[TaskLaunch]:
    """``launches`` for an agent too old for signals: without their time-limit warnings."""
    out: list[TaskLaunch] = []
    for sent in launches:
        if sent.signal is not None:
            log.warning(
                "node %s's agent is too old for the time-limit warning (%s): task %s starts "
                "without it",
                node,
                sent.signal.name,
                sent.task_id,
            )
            sent = sent.model_copy(update={"signal": None})
        out.append(sent)
    return out


def leaving(ctl: Controller, name: str) -> NodeState:
    """Node ``name``'s agent is stopping and kills its tasks: the node is handled as one that
    fell silent (:func:`failures.node_lost`), at once instead of after ``node_timeout_s`` —
    down with the reason :data:`AGENT_STOPPED`, its tasks lost, their jobs requeued or
    failed by their restart policies. It stays down until its agent registers again. A node
    that is neither up nor draining (down already, asleep for power saving) keeps its state.
    Returns the state the node is shown in; :class:`UnknownNodeError` for one not known."""
    now = ctl.clock()
    with ctl.work:
        node = ctl.nodes.get(name)
        if node is None:
            raise UnknownNodeError(name)
        if node.state in (NodeState.UP, NodeState.DRAINING):
            node.left = True
            failures.set_node_state(ctl, name, NodeState.DOWN, AGENT_STOPPED, now)
            failures.node_lost(ctl, name, now, f"node {name}'s agent stopped")
            ctl.persist.flush()
            ctl.work.notify_all()  # (a long poll of a job's other nodes may carry kills now)
            ctl.wake()
        return drains.shown_state(ctl, name)


def remote_launch(
    ctl: Controller,
    job_id: str,
    node: str,
    argv: list[str],
    env: Mapping[str, str],
    step: int | None = None,
) -> str:
    """Start a helper process of a running job on one of its nodes (mpirun's orted), with
    its own variables ``env`` (:func:`launch_remote`). ``step``: it is a helper of that job
    step (a step's mpirun starts it): it carries the step's id, not a share of its slots
    (:class:`SubmitError` when no such step runs)."""
    with ctl.work:
        live = running_job(ctl, job_id)
        check_remote_node(ctl, live, node)
        marks: dict[str, str] = {}
        if step is not None:
            check_step_runs(live, step)
            marks = {STEP_ID_ENV: str(step)}
        gpus = helper_gpus(ctl, live, node, step)
        task_id = launch_remote(ctl, live, node, argv, marks, env, gpus)
        ctl.work.notify_all()
    return task_id


def remote_kill(ctl: Controller, task_id: str) -> None:
    """Stop a running remote task of a job (a job step's, when its ``srun`` is stopped);
    :class:`UnknownJobError` when there is no such task running (one that has ended: nothing)."""
    with ctl.work:
        entry = ctl.tasks.get(task_id)
        if entry is None:
            if task_id in ctl.finished:
                return
            raise UnknownJobError(task_id)
        task = entry[1]
        if not task.remote:
            raise SubmitError(f"task {task_id} is one of the job's own: cancel the job instead")
        ctl.kill_task(task, "stopped by its job step")
        ctl.work.notify_all()


def task_status(ctl: Controller, task_id: str) -> tuple[str, int | None, str]:
    """(state, exit code, reason) of a live or recently finished task."""
    with ctl.lock:
        entry = ctl.tasks.get(task_id)
        task = entry[1] if entry is not None else ctl.finished.get(task_id)
        if task is None:
            raise UnknownJobError(task_id)
        return task.state, task.exit_code, task.reason


def _check_unchanged(known: LiveNode, inventory: NodeInventory) -> None:
    """Refuse (before anything changes) a node registering again with another size: the core
    and the node's pool keep what its first registration said until the controller restarts."""
    spec = node_spec(inventory)
    changed = [
        what
        for what, old, new in (
            ("resources", known.spec.capacity, spec.capacity),
            ("devices", known.spec.devices, spec.devices),
            ("labels", known.spec.labels, spec.labels),
            ("cpu_ids", sorted(known.inventory.cpu_ids), sorted(inventory.cpu_ids)),
        )
        if old != new
    ]
    if changed:
        raise NodeChangedError(
            f"node {inventory.name!r} is registered with other {', '.join(changed)}; a node "
            "keeps them until the controller restarts (or register it under a new name)"
        )


def _check_node_identity(inventory: NodeInventory) -> None:
    if not _NODE_NAME.fullmatch(inventory.name):
        raise SubmitError(
            f"invalid node name {inventory.name!r}: letters, digits, '.', '_' and '-', "
            "starting with a letter or digit"
        )
    if not _ADDRESS.fullmatch(inventory.address):
        raise SubmitError(f"invalid node address {inventory.address!r}: a host name or IP")
