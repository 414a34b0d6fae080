"""Changing a running controller's tenancy and licenses: ``fusesched reconfigure``
(``POST /v1/reconfigure``) and SIGHUP, as Slurm's ``scontrol reconfigure``.

The controller re-reads the tenancy file it was started with (``--tenancy FILE``: the same
path) and, when the request carries them, takes new license counts. All or nothing: a file
that cannot be read or is invalid changes nothing and gets the error the controller would
give at startup; a change that would orphan work is refused with its reasons
(:mod:`fusesched.core.reconfig`). A valid change is applied under the controller's lock, so
between scheduling cycles, through the core's own call; what reads the configuration
(``fusesched queues``, ``share``, ``licenses``, the metrics, the portal) sees it at once.
A dry run checks and says what would change, and changes nothing.

Running jobs keep running when a quota or license count shrinks below what they use; the
queue (or license) then admits nothing new until enough of them has ended — what Kueue and
Slurm do. See docs/TENANCY.md, "Changing the configuration of a running controller".
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from fusesched.core import reconfig
from fusesched.model.licenses import LicenseError, Licenses, normalize
from fusesched.model.resources import format_quantity
from fusesched.model.tenancy import TenancyError
from fusesched.policies.tenancy_diff import Change, license_changes, tenancy_changes
from fusesched.policies.tenancy_policy import TenancyPolicy
from fusesched.store import EventRow
from fusesched.yamlfile import YamlFileError, read_yaml

if TYPE_CHECKING:
    from fusesched.controller.service import Controller
    from fusesched.policies.registry import CoreConfig

log = logging.getLogger("fusesched.controller")

#: What the answer says when the controller has no tenancy file.
NO_TENANCY_FILE = (
    "the controller was started without --tenancy: there is no tenancy file to re-read"
)


class TenancyFileError(ValueError):
    """The tenancy file cannot be read or is invalid (the message is the one a controller
    gives when it starts with it)."""


class ReconfigureFailed(Exception):
    """Nothing changed: ``status`` 400 for an unreadable or invalid file or license list, 409
    for a change that would orphan work (the message says why)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Outcome:
    """What a reconfiguration did (or, for a dry run, would do)."""

    applied: bool
    dry_run: bool
    tenancy_file: Path | None
    changes: tuple[Change, ...]
    notes: tuple[str, ...]


def read_tenancy_file(path: Path) -> TenancyPolicy:
    """The tenancy policy in ``path``; :class:`TenancyFileError` with the reason if the file
    cannot be read or is invalid (the controller's startup and reconfiguration alike)."""
    try:
        data = read_yaml(path, "tenancy configuration")
    except YamlFileError as exc:
        raise TenancyFileError(str(exc)) from None
    try:
        return TenancyPolicy.from_dict(data)
    except TenancyError as exc:
        raise TenancyFileError(f"{path}: {exc}") from None


def reconfigure(
    ctl: Controller, licenses: Licenses | None = None, dry_run: bool = False
) -> Outcome:
    """Re-read ``ctl``'s tenancy file (if it has one) and take ``licenses`` (``None``: keep
    the counts; ``()``: no license any more), checked as a whole; applied unless
    ``dry_run``. :class:`ReconfigureFailed` when nothing may change.

    One at a time: a second call (an API request, a SIGHUP) waits for the first to end and
    then reads the file itself, so the file as it was last read is what is in force (two
    calls overlapping would otherwise apply in the order they took the lock, the older
    read last)."""
    if licenses is not None:
        try:
            licenses = normalize(licenses)
        except LicenseError as exc:
            raise ReconfigureFailed(400, f"licenses: {exc}") from None
    with _ONE_AT_A_TIME:
        return _reconfigure(ctl, licenses, dry_run)


#: Held by a reconfiguration from reading the file to applying it (never by the scheduling
#: loop: a cycle is not held up while the file is read).
_ONE_AT_A_TIME = threading.Lock()


def _reconfigure(ctl: Controller, licenses: Licenses | None, dry_run: bool) -> Outcome:
    path = ctl.config.tenancy_file
    policy = None
    if path is not None:
        try:
            policy = read_tenancy_file(path)  # (outside the scheduling lock: it reads a file)
        except TenancyFileError as exc:
            raise ReconfigureFailed(400, f"{exc}; nothing was changed") from None
    with ctl.lock:  # (the scheduling loop holds it for a whole cycle: we run between two)
        core = ctl.core
        old_policy = core.config.tenancy
        changes: list[Change] = []
        if policy is not None and old_policy is not None:
            changes += tenancy_changes(old_policy, policy)
        if licenses is not None:
            changes += license_changes(core.config.licenses, licenses)
        tenancy = policy if policy is not None and policy != old_policy else None
        counts = licenses if licenses is not None and licenses != core.config.licenses else None
        pending = [live.spec for live in ctl.jobs.values() if live.id not in core.jobs]
        try:
            change = reconfig.prepare(core, tenancy, counts, pending)
        except reconfig.ReconfigureRefused as exc:
            raise ReconfigureFailed(
                409, "refused, nothing was changed: " + "; ".join(exc.reasons)
            ) from None
        notes = _notes(ctl, change, path)
        applied = not dry_run and (tenancy is not None or counts is not None)
        if applied:
            reconfig.apply(core, change, ctl.clock())
            ctl.config = replace(ctl.config, core=core.config)
    if applied:
        log.warning(
            "reconfigured%s: %s",
            f" from {path}" if path is not None else "",
            "; ".join(str(c) for c in changes) or "no change",
        )
        ctl.wake()
    return Outcome(applied, dry_run, path, tuple(changes), tuple(notes))


def _notes(ctl: Controller, change: reconfig.Reconfiguration, path: Path | None) -> list[str]:
    """What the operator should know beyond the changes: no file to re-read; running jobs
    above a quota or license count that shrank (they keep running, new ones wait); license
    counts that a restart would undo."""
    out: list[str] = []
    if path is None:
        out.append(NO_TENANCY_FILE)
    gate = ctl.core.tenants
    if change.tenancy is not None and gate is not None:
        new_queues = {q.name: q for q in change.tenancy.config.queues}
        for queue in gate.config.queues:
            after = new_queues.get(queue.name)
            if after is None:
                continue
            nominal = {
                (qq.flavor, r): rq.nominal for qq in after.quotas for r, rq in qq.resources.items()
            }
            for (flavor, res), used in sorted(gate.ledger.usage(queue.name).items()):
                limit = nominal.get((flavor, res))
                if limit is not None and used > limit:
                    out.append(
                        f"queue {queue.name} uses {format_quantity(res, used)} {flavor}/{res}, "
                        f"above its new nominal quota of {format_quantity(res, limit)}: its "
                        "running jobs keep running; it admits nothing more there (beyond "
                        "what it may borrow) until enough of them has ended"
                    )
    if change.licenses is not None:
        pool = ctl.core.licenses
        totals = dict(change.licenses)
        if pool is not None:
            for name, used in sorted(pool.used.items()):
                if name in totals and used > totals[name]:
                    out.append(
                        f"license {name}: running jobs hold {used}, above the new count "
                        f"{totals[name]}: they keep them; waiting jobs wait until enough is back"
                    )
        out.append(
            "license counts set here last until the controller restarts: give the same to its "
            "--licenses (where it is started) to keep them"
        )
    return out


def reload_core(core: CoreConfig, path: Path | None) -> CoreConfig:
    """``core`` with the tenancy file re-read (a standby taking over: the file may have
    changed since it started); ``core`` as it was, with a warning in the log, when there is
    no file or it is now unreadable or invalid."""
    if path is None:
        return core
    try:
        return replace(core, tenancy=read_tenancy_file(path))
    except (TenancyFileError, ValueError) as exc:
        log.warning("taking over with the tenancy read at startup: %s", exc)
        return core


def hangup(ctl: Controller | None) -> str:
    """SIGHUP: reconfigure as ``fusesched reconfigure`` without options does; the line to
    print (what changed, or why nothing did). An applied change goes to the audit log (when
    the controller checks tokens, as the API's do), by ``SIGHUP``."""
    if ctl is None:
        return (
            "SIGHUP: not leading (starting, standing by or stopping): nothing to re-read now "
            "(the tenancy file is read when the controller starts leading)"
        )
    try:
        outcome = reconfigure(ctl)
    except ReconfigureFailed as exc:
        return f"SIGHUP: {exc}"
    if outcome.applied and ctl.auth is not None and ctl.auth.enabled:
        from fusesched.api.access import AUDIT  # (the API's audit log: one for all)

        said = [str(c) for c in outcome.changes]
        data = {"action": "reconfigure", "by": "SIGHUP", "changes": said}
        ctl.persist.store.add_events([EventRow(ctl.clock(), AUDIT, data=data)])
    if outcome.tenancy_file is None:
        return f"SIGHUP: {NO_TENANCY_FILE}"
    said_all = "; ".join(str(c) for c in outcome.changes) or "nothing changed"
    return f"SIGHUP: re-read {outcome.tenancy_file}: {said_all}"


def on_hangup(controller_of: Callable[[], Controller | None], say: Callable[[str], None]) -> None:
    """Make SIGHUP reconfigure the controller ``controller_of()`` gives (None: none leads
    yet, or any more) and ``say`` the outcome (:func:`hangup`). Call it from the main thread
    as early as the process may get a SIGHUP (its default action ends the process).

    The signal handler only writes a byte to a pipe: Python runs it in the main thread
    between two bytecodes, wherever that thread is, so it does no work there (no lock, not
    even a thread started: none may start while the interpreter shuts down, and a burst of
    signals would start one each). A thread of its own waits on the pipe and does the work,
    one SIGHUP at a time; several that come while it works make one more re-read."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)

    def handler(_signum: int, _frame: object) -> None:
        with contextlib.suppress(OSError):  # (the pipe is full: re-reads are due anyway)
            os.write(write_end, b"\0")

    def serve() -> None:
        while os.read(read_end, 4096):
            try:
                say(hangup(controller_of()))
            except Exception:  # a failed re-read must not end the listening
                log.exception("SIGHUP: the reconfiguration failed")

    threading.Thread(target=serve, name="fusesched-sighup", daemon=True).start()
    signal.signal(signal.SIGHUP, handler)
