"""What ``fusesched sacct``'s selecting options keep, as Slurm's sacct, and which fields it
prints: ``-N`` (jobs that ran on any of these nodes), ``-q`` (QOS), ``-g`` (the user's group,
by gid or name), ``-i``/``-I`` (allocated nodes or CPUs: ``N``, exactly, or ``MIN-MAX``),
``-k``/``-K`` (the time limit, in minutes: ``-k`` alone exactly, with ``-K`` a range; ``-K``
alone changes nothing), ``--reason`` (the reason code a job shows, as squeue's ``%r``:
:mod:`fusesched.cli.sacct_reasons`), ``-C`` (the node features a job asked for, each of them a
part of its ``constraints`` text, any case, as Slurm's database compares them; a job whose
view carries none asked for none), ``-W`` (WCKeys), ``-x`` (association ids) and ``-F``
(scheduler flags), which fusesched keeps none of: a job has none, so none matches, as Slurm's
job without them. ``-T`` cuts a row's start and end to the window. ``-o``, ``-b``, ``-l``,
``-c`` and ``SACCT_FORMAT`` make the field list.

Pure functions of the job views (the user and group database read for ``-g``); bad input
raises ``ValueError`` with a message that says what is taken.
"""

from __future__ import annotations

import grp
import math
import pwd
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from fusesched.cli.id_lists import comma_list
from fusesched.cli.sacct_reasons import reason_code
from fusesched.hostlist import expand_hostlist
from fusesched.submit.syntax import parse_slurm_time

Job = dict[str, Any]

#: sacct's fields: by default, ``-b``, ``-l``, and with ``-c`` (job completion data).
DEFAULT_FIELDS: Final = "jobid,jobname,partition,account,alloccpus,state,exitcode"
BRIEF_FIELDS: Final = "jobid,state,exitcode"
LONG_FIELDS: Final = (
    "jobid,jobidraw,jobname,partition,maxvmsize,maxvmsizenode,maxvmsizetask,avevmsize,"
    "maxrss,maxrssnode,maxrsstask,averss,maxpages,maxpagesnode,maxpagestask,avepages,mincpu,"
    "mincpunode,mincputask,avecpu,ntasks,alloccpus,elapsed,state,exitcode,avecpufreq,"
    "reqcpufreqmin,reqcpufreqmax,reqcpufreqgov,reqmem,consumedenergy,maxdiskread,"
    "maxdiskreadnode,maxdiskreadtask,avediskread,maxdiskwrite,maxdiskwritenode,"
    "maxdiskwritetask,avediskwrite,reqtres,alloctres,tresusageinave,tresusageinmax,"
    "tresusageinmaxn,tresusageinmaxt,tresusageinmin,tresusageinminn,tresusageinmint,"
    "tresusageintot,tresusageoutmax,tresusageoutmaxn,tresusageoutmaxt,tresusageoutave,"
    "tresusageouttot"
)
COMPLETION_FIELDS: Final = "jobid,uid,jobname,partition,nnodes,nodelist,state,end"
BRIEF_COMPLETION_FIELDS: Final = "jobid,uid,state"
LONG_COMPLETION_FIELDS: Final = (
    "jobid,uid,jobname,partition,nnodes,nodelist,state,start,end,timelimit"
)
#: ``-F``'s flags (any case).
FLAGS: Final = ("SchedSubmit", "SchedMain", "SchedBackfill")
#: The time limit of a job without one, for ``-k``/``-K`` (Slurm's INFINITE).
UNLIMITED: Final = math.inf
_UNLIMITED_WORDS: Final = frozenset({"-1", "infinite", "unlimited"})
_COUNT: Final = re.compile(r"([0-9]{1,12})([kKmM]?)")


def field_list(
    formats: Iterable[str],
    brief: bool = False,
    long: bool = False,
    completion: bool = False,
    environ: str | None = None,
) -> str:
    """The fields to print, as Slurm's sacct makes the list: ``-o``'s (each given adds to
    it), then ``-b``'s, then ``-l``'s; none of them: ``environ`` (``SACCT_FORMAT``), else
    the default (with ``-c``, the completion data's: no ``SACCT_FORMAT``). A
    ``ValueError`` for ``-o`` with ``-l``."""
    given = list(formats)
    if long and given:
        raise ValueError("--format (-o) and --long (-l) are mutually exclusive: give one")
    if brief:
        given.append(BRIEF_COMPLETION_FIELDS if completion else BRIEF_FIELDS)
    if long:
        given.append(LONG_COMPLETION_FIELDS if completion else LONG_FIELDS)
    if given:
        return ",".join(given)
    if completion:
        return COMPLETION_FIELDS
    return environ if environ else DEFAULT_FIELDS


@dataclass(frozen=True)
class Range:
    """``-i``/``-I``'s ``N`` (``high`` None: exactly N) or ``MIN-MAX``."""

    low: int
    high: int | None = None

    def holds(self, count: float) -> bool:
        if self.high is None:
            return count == self.low
        return self.low <= count <= self.high


def parse_range(text: str, what: str) -> Range:
    """``N`` or ``MIN-MAX`` (each may end in ``k`` or ``m``: ×1024, ×1048576, as Slurm
    reads counts); ``what``: the option, for the message."""
    low_text, dash, high_text = text.strip().partition("-")
    low = _count(low_text, text, what)
    if not dash:
        return Range(low)
    high = _count(high_text, text, what)
    if high <= 0 or high < low:
        raise ValueError(f"invalid {what} range {text!r}: MIN-MAX, MAX at least MIN and 1")
    return Range(low, high)


def _count(part: str, text: str, what: str) -> int:
    match = _COUNT.fullmatch(part.strip())
    if match is None:
        raise ValueError(f"invalid {what} range {text!r}: N or MIN-MAX")
    scale = {"": 1, "k": 1024, "m": 1024 * 1024}[match[2].lower()]
    return int(match[1]) * scale


def parse_timelimit(text: str) -> float:
    """``-k``/``-K``'s time limit in minutes (a part of one rounded up), from Slurm's forms
    (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``), or
    :data:`UNLIMITED` (``UNLIMITED``, ``INFINITE``, ``-1``); a ``ValueError`` for another
    or for none (0), as Slurm's "Invalid time limit specification"."""
    word = text.strip()
    if word.lower() in _UNLIMITED_WORDS:
        return UNLIMITED
    try:
        seconds = parse_slurm_time(word)
    except ValueError:
        seconds = None
    if seconds is None:
        raise ValueError(
            f"invalid time limit {text!r}: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS "
            "(more than 0) or UNLIMITED"
        )
    return float(math.ceil(seconds / 60))


def parse_gids(given: Iterable[str] | None) -> frozenset[int]:
    """``-g``'s groups (comma lists of gids or group names) as gids."""
    gids: set[int] = set()
    for item in comma_list(given, "group"):
        if item.isdigit():
            gids.add(int(item))
            continue
        try:
            gids.add(grp.getgrnam(item).gr_gid)
        except KeyError:
            raise ValueError(f"invalid group id: {item!r} (no such group here)") from None
    return frozenset(gids)


def parse_flags(given: Iterable[str] | None) -> frozenset[str]:
    """``-F``'s flags (any case, the whole name: Slurm 22.05's sacct refuses ``schedm``), by
    their names."""
    by_lower = {f.lower(): f for f in FLAGS}
    names: set[str] = set()
    for item in comma_list(given, "flag"):
        if item.lower() not in by_lower:
            raise ValueError(f"invalid job flag {item!r}: {', '.join(FLAGS)} (any case)")
        names.add(by_lower[item.lower()])
    return frozenset(names)


def parse_constraints(given: Iterable[str] | None) -> tuple[str, ...]:
    """``-C``'s node features (comma lists), in lower case, each once, in order."""
    return tuple(dict.fromkeys(item.lower() for item in comma_list(given, "constraint")))


def serves_constraints(jobs: Iterable[Job]) -> bool:
    """Whether any of these views carries ``constraints`` (a controller that serves them)."""
    return any("constraints" in job for job in jobs)


def parse_nodes(given: Iterable[str] | None) -> frozenset[str]:
    """``-N``'s nodes (host lists: ``n[1-3],gpu1``)."""
    names: set[str] = set()
    for item in given or ():
        names.update(expand_hostlist(item))
    return frozenset(name for name in names if name)


def lower_set(given: Iterable[str] | None, what: str) -> frozenset[str]:
    """A comma list's items in lower case (``-q``, ``-R``, ``-W``, ``-x``: names compared in
    any case, as Slurm's database keeps them)."""
    return frozenset(item.lower() for item in comma_list(given, what))


@dataclass(frozen=True)
class Selection:
    """What the selecting options keep (empty, None: anything)."""

    nodes: frozenset[str] = frozenset()
    qos: frozenset[str] = frozenset()
    gids: frozenset[int] = frozenset()
    reasons: frozenset[str] = frozenset()
    constraints: tuple[str, ...] = ()
    wckeys: frozenset[str] = frozenset()
    associations: frozenset[str] = frozenset()
    flags: frozenset[str] = frozenset()
    nnodes: Range | None = None
    ncpus: Range | None = None
    timelimit: tuple[float, float | None] | None = None  # (-k, -K)

    def keeps(self, job: Job) -> bool:
        """Whether ``job`` (a job's view) is selected."""
        if self.wckeys or self.associations or self.flags:
            return False  # (fusesched keeps none: no job has one)
        if self.nodes and not self.nodes & set(job.get("nodes") or ()):
            return False
        if self.qos and str(job.get("qos") or "").lower() not in self.qos:
            return False
        if self.gids and _gid(job) not in self.gids:
            return False
        if self.reasons and reason_code(job.get("reason")) not in self.reasons:
            return False
        if self.constraints:
            asked = str(job.get("constraints") or "").lower()
            if not all(feature in asked for feature in self.constraints):
                return False
        started = job.get("start_time") is not None
        if self.nnodes and not self.nnodes.holds(len(job.get("nodes") or ()) if started else 0):
            return False
        if self.ncpus and not self.ncpus.holds(float(job.get("cpus") or 0) if started else 0):
            return False
        return self.timelimit is None or _within(_limit_minutes(job), *self.timelimit)


def _gid(job: Job) -> int | None:
    try:
        return pwd.getpwnam(str(job.get("user") or "")).pw_gid
    except (KeyError, ValueError):
        return None


def _limit_minutes(job: Job) -> float:
    limit = job.get("time_limit_s")
    return UNLIMITED if limit is None else float(math.ceil(limit / 60))


def _within(minutes: float, low: float, high: float | None) -> bool:
    return minutes == low if high is None else low <= minutes <= high


def truncate(view: Job, since: float, until: float) -> Job:
    """``-T``: a started row's start no earlier than ``since`` and its end (a running one's:
    ``until``) no later than ``until``, as Slurm's sacct cuts them to the window."""
    start = view.get("start_time")
    if start is None:
        return view
    end = view.get("end_time")
    cut_end = until if end is None else min(float(end), until)
    return {**view, "start_time": max(float(start), since), "end_time": max(cut_end, since)}


def window_line(states: Iterable[str] | None, since: float | None, until: float) -> str:
    """``-v``'s line on standard error: which jobs in which window (``Eligible``: any state;
    a start of None: the epoch), as Slurm's sacct says it."""
    which = ",".join(sorted(states)) if states else "Eligible"
    start = "Epoch 0" if not since else _ctime(since)
    end = _ctime(until)
    if start == end:
        return f"sacct: Jobs {which} at the time instant {start}"
    return f"sacct: Jobs {which} in the time window from {start} to {end}"


def _ctime(t: float) -> str:
    return time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(t))
