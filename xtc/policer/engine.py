"""The thin layer that applies the policies: poll the daemons, plan, push commands, record.

Why one file: :class:`Engine` is one cycle (poll, plan, command, record) whose steps share the
routers' state and the work queue; the decisions are :mod:`xtc.policer.planner`'s (pure), the
storage :mod:`xtc.policer.store`'s, the transport :mod:`xtc.policer.link`'s.

Every ``period_s`` the engine asks each registered router's daemon for its VRs (``list``), records
what it saw, runs :func:`xtc.policer.planner.plan_router` on the stored state, saves the new state and
the decisions, and sends the commands that bring the daemon to the wanted state.  Routers are handled
concurrently, so one that does not answer (marked ``unreachable``, with the error, at its deadline,
then retried with exponential backoff) delays no other; when it answers again the same
reconciliation catches it up.

With a :class:`~xtc.policer.samples.SampleStreams`, a router registered with its daemon's samples
endpoint (``pub_endpoint``) is measured from the newest message of its PUB stream instead, with no
request, while that message is at most ``sample_max_age_s`` old and names the VRs the router's last
``list`` named, and arrived after the replies to the router's last commands (an older one would
show the VRs as they were and have the commands sent again); a router never listed, whose VR set
changed, just commanded, or whose stream is stale or silent is sent ``list`` as before (a dead one is then marked at that exchange's deadline).  Both go through
the same batches, planning and commands.  Between cycles a stream that falls silent (nothing for
``silence_s``, 1.25 periods: a sample is due every period) has its router sent ``list`` at once with
a deadline of half a period (:meth:`Engine.probe_silent`), so that a daemon that stops answering is
marked within 2 periods of its last answer rather than at the next cycle's stale sample plus a whole
timeout.

A router whose plan inputs (its VRs' measurements and policy state, its activation state, capacity
and control mode, the settings) are those of its last plan, when that plan changed nothing (nothing
saved, sent or recorded), is not planned again while no policy timer it runs has reached its hold:
the plan, a pure function of those inputs and the time, would again change nothing.  Its
measurements are recorded all the same.  The routers a batch does plan are first screened together
over arrays (:func:`xtc.policer.quiet.quiet_routers`: the policies' per-VR arithmetic for the whole
batch at once); one whose plan is certainly quiet (nothing changed, sent or recorded, as when its rates
merely moved) is recorded as such without :func:`~xtc.policer.planner.plan_router`, which plans the
others and makes every decision.

A daemon's reply is untrusted: a reply that is not a valid manager-API reply, or a ``list`` whose
VRs do not validate against the daemon's published :class:`xtc.daemon.api.Instance` model (or name
a VR the API cannot address, or list more than ``max_vrs_per_router``), is dropped whole and
counted (:attr:`Engine.bad_replies`); the router is marked ``unreachable`` with the problem as its
``last_error``, and every other router goes on.

With ``shard=(i, n)`` the engine polices only the routers whose name hashes to ``i`` (:func:`shard_of`):
``engine.shards`` engine processes share a fleet, each on a core of its own (a router is planned
from its own state alone, so nothing is lost by the split), and a policy cycle takes a shard's
routers, a share of the fleet.  Shard ``i`` starts its cycles ``i / n`` of a period after shard 0's
(:meth:`Engine.cycle_phase_s`, on the system-wide monotonic clock): the shards' cycles take turns
at the cores and at the database's write lock instead of all starting at once.

Every duration the policies measure (activation hold, punishment and restoration timers) is on
``clock``, a monotonic clock (``CLOCK_MONOTONIC`` is system-wide, so the timers stored in the
database survive a restart of the policer; a timer stored in the future of the clock, i.e. from
before a reboot, restarts from now).  Wall time is used only for the records' timestamps.
"""

from __future__ import annotations

import bisect
import collections
import itertools
import logging
import math
import queue
import sys
import threading
import time
import zlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from xtc.service.heap import release_free_heap
from .link import BadReply, DaemonRefused, LinkDown, LinkPool, parse_vr_list
from .live import LiveTable
from .liveshare import PUBLISH_S, LiveWriter
from .rows import SampleRows
from .samples import SampleStreams
from .planner import Command, RouterInput, RouterPlan, Settings, VrObs, VrPolicy, plan_router
from .quiet import COLUMNS, plan_columns, quiet_columns
from .policy import OFF_LEVEL, PAUSE_LEVEL, ActivationState, MisbehaviourState
from .store import ExchangeOutcome, Store, VrRow

__all__ = ["Engine", "RouterState", "shard_of", "percentiles", "CYCLE_BUCKETS_S"]

#: Upper bounds of the buckets of ``xtc_policer_cycle_seconds`` (a histogram), seconds.
CYCLE_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)

log = logging.getLogger("xtc.policer.engine")

#: Most VRs' rows of a snapshot of the measurements written after one batch (about 40-80 ms of SQLite's
#: write lock here): a snapshot of 80,000 VRs takes about 20 batches instead of stalling one by seconds.
SNAPSHOT_ROWS = 4096


def shard_of(router: str, shards: int) -> int:
    """The engine shard (``0..shards-1``) that polices ``router``: CRC-32 of its name modulo ``shards``
    (stable across processes, hosts and Python versions, unlike ``hash``)."""
    return zlib.crc32(router.encode("utf-8")) % shards


def percentiles(xs: list[float], scale: float = 1.0, digits: int = 1) -> dict[str, float]:
    """``{"p50", "p99", "max"}`` of ``xs`` (not empty) times ``scale``, rounded to ``digits``: the nearest
    rank (the value at index ``int(q * n)`` of the sorted values), one definition for the policer's
    times (``/health``'s cycle and measurement gap, the bench's marks of dead routers)."""
    xs = sorted(xs)
    pick = lambda q: xs[min(len(xs) - 1, int(q * len(xs)))]  # noqa: E731
    return {"p50": round(pick(0.5) * scale, digits), "p99": round(pick(0.99) * scale, digits),
            "max": round(xs[-1] * scale, digits)}


def _not_after(t: float | None, now: float) -> float | None:
    """A stored timer start; one in the future of the monotonic clock (from before a reboot) restarts now."""
    return None if t is None else min(t, now)


def _finite(v: float | None) -> float | None:
    """A value as the store keeps it (None for a missing or non-finite one)."""
    return None if v is None or not math.isfinite(v) else float(v)


def _backing_off(st: RouterState | None, now: float) -> bool:
    """Whether a router (its state, None: never handled) waits out a backoff at ``now`` (clock seconds): not
    to be claimed for a measurement, by a cycle or between cycles."""
    return st is not None and st.backoff is not None and st.backoff[0] > now


def _vr_policy(row: VrRow, now: float) -> VrPolicy:
    return VrPolicy(
        weight=row.sla_weight if row.sla_weight is not None else 1.0,
        min_pps=row.sla_min_pps if row.sla_min_pps is not None else 0.0,
        max_pps=row.sla_max_pps if row.sla_max_pps is not None else math.inf,
        manual_setpoint_pps=row.manual_setpoint_pps,
        misbehaviour=MisbehaviourState(row.punish_level, _not_after(row.punish_bad_since_s, now),
                                       _not_after(row.punish_good_since_s, now)),
        punish_base_pps=row.punish_base_pps,
        derived_setpoint_pps=row.derived_setpoint_pps,
        vr_off_allowed=bool(row.punish_vr_off),
    )


def _same_inputs(fixed: tuple, head: tuple, rows: dict[str, VrRow]) -> bool:
    """Whether a router's plan inputs (``head``: the settings, capacity, control mode and activation state;
    ``rows``) are those kept in
    ``fixed`` (head, rows).  The store never changes rows it gave (a write makes new ones), so the very
    rows are equal ones; other rows are compared column by column."""
    if fixed[0] != head:
        return False
    old = fixed[1]
    if old is rows:
        return True
    # the same VRs with equal rows (every column but the name is a plan input), VR by VR, stopping at the first
    # that differs (with moving rates: the first)
    return old.keys() == rows.keys() and all(old[n] == row for n, row in rows.items())


def _timers(settings: Settings, act: ActivationState, rows: dict[str, VrRow]) -> tuple[tuple[float, float], ...]:
    """The policy timers that run, as ``(since_s, hold_s)``: until ``now - since_s >= hold_s`` for one of
    them, a plan of unchanged inputs does not depend on the time (:func:`~xtc.policer.policy.activation_step`
    and :func:`~xtc.policer.policy.misbehaviour_step` read it only to start a timer or to compare one
    with its hold; a VR at the last level stays there however long it misbehaves)."""
    out = []
    if act.pending_since_s is not None:
        out.append((act.pending_since_s, settings.activation.hold_s))
    m = settings.misbehaviour
    for row in rows.values():
        top = OFF_LEVEL if row.punish_vr_off else PAUSE_LEVEL  # the VR's last level (its network's switch)
        if row.punish_bad_since_s is not None and row.punish_level < top:
            out.append((row.punish_bad_since_s, m.hold_s))
        if row.punish_good_since_s is not None:
            out.append((row.punish_good_since_s, m.restore_hold_s))
    return tuple(out)


def _vr_changes(plan: RouterPlan, rows: dict[str, VrRow]) -> dict[str, dict[str, Any]]:
    """The VRs whose policy or wanted state the plan changes (what :meth:`Store.save_plans` writes), by name."""
    per_vr = {}
    for n, p in plan.policies.items():
        want = plan.wanted.get(n, (None, None))
        ms = p.misbehaviour
        row = rows.get(n)
        if row is not None and (row.derived_setpoint_pps, row.wanted_state, row.wanted_setpoint_pps,
                                row.punish_level, row.punish_bad_since_s, row.punish_good_since_s,
                                row.punish_base_pps) == (
                _finite(p.derived_setpoint_pps), want[0], _finite(want[1]), ms.level, ms.bad_since_s,
                ms.good_since_s, _finite(p.punish_base_pps)):
            continue  # unchanged: not written again
        per_vr[n] = {"derived_setpoint_pps": p.derived_setpoint_pps, "misbehaviour": ms,
                     "punish_base_pps": p.punish_base_pps, "wanted_state": want[0],
                     "wanted_setpoint_pps": want[1]}
    return per_vr


_FWD, _OFF, _SAT = (COLUMNS.index(c) for c in ("forwarded_pps", "offered_pps", "saturated"))


def _live_key(live: LiveTable, name: str) -> tuple | None:
    """The router's live measurements as a value to compare (:meth:`LiveTable.key`: its VRs' names and the
    write that left their values; a measurement of equal values is recorded without a write)."""
    return live.key(name)


def _plan_block(st: RouterState, rows: dict[str, VrRow], live: LiveTable, name: str) -> tuple[Any, Any]:
    """The router's plan inputs in columns (:func:`~xtc.policer.quiet.plan_columns` of its rows, kept while the
    store gives the very rows) and, per VR in the rows' order, its row in the live table (-1: none, its
    row's measurements hold); (None, None): planned without the arrays."""
    blk = st.block
    slot = live.slot(name)
    start, names = slot if slot is not None else (-1, ())
    if blk is not None and blk[0] is rows and blk[2] == start and blk[3] == names:
        return blk[1], blk[4]
    cols = blk[1] if blk is not None and blk[0] is rows else plan_columns(rows)
    if cols is None:
        idx = None
    elif tuple(rows) == names:
        idx = np.arange(start, start + len(names), dtype=np.intp)
    else:
        at = {n: start + i for i, n in enumerate(names)}
        idx = np.fromiter((at.get(n, -1) for n in rows), dtype=np.intp, count=len(rows))
    st.block = (rows, cols, start, names, idx)
    return cols, idx


def _quiet_demands(todo: list[tuple], live: LiveTable) -> dict[str, float]:
    """The routers of ``todo`` (the batch's routers to plan: router, settings, now, t0, activation, rows, head,
    state) whose plans :func:`~xtc.policer.quiet.quiet_columns` says are quiet, with their demands: one call
    per settings object (one per cycle).  The plan inputs are the routers' columns kept with their rows, the
    measurements the live table's (gathered in one indexing per column)."""
    groups: dict[int, list[tuple]] = {}
    for t in todo:
        groups.setdefault(id(t[1]), []).append(t)
    out: dict[str, float] = {}
    for group in groups.values():
        blocks, idxs, counts = [], [], []
        for t in group:
            cols, idx = _plan_block(t[7], t[5], live, t[0]["name"])
            if cols is None:
                counts.append(-1)
                continue
            counts.append(cols.shape[1])
            blocks.append(cols)
            idxs.append(idx)
        if blocks:
            cols = np.concatenate(blocks, axis=1)
            idx = np.concatenate(idxs)
            has = idx >= 0
            if has.all():
                cols[_FWD], cols[_OFF], cols[_SAT] = live.forwarded_pps[idx], live.offered_pps[idx], live.saturated[idx]
            else:
                i = idx[has]
                cols[_FWD, has], cols[_OFF, has], cols[_SAT, has] = (live.forwarded_pps[i], live.offered_pps[i],
                                                                     live.saturated[i])
        else:
            cols = np.empty((len(COLUMNS), 0))
        quiet, demand = quiet_columns(group[0][1], [(t[0]["capacity_pps"], t[0]["control_mode"], t[4].on,
                                                     t[4].pending_since_s) for t in group],
                                      np.array(counts, dtype=np.intp), cols, [t[2] for t in group])
        for t, q, d in zip(group, quiet.tolist(), demand.tolist()):
            if q:
                out[t[0]["name"]] = d
    return out


def _observed(rows: dict[str, VrRow], live: LiveTable, name: str) -> dict[str, VrObs]:
    """The router's VRs as its daemon reported them (:func:`_vr_obs` of its rows), with the live table's
    measurements of the VRs it holds (the rows from :meth:`~xtc.policer.store.Store.plan_states` may hold
    older ones), made from the rows and the table without a copy of a row."""
    got = live.vrs(name)
    if not got:
        return {n: _vr_obs(row) for n, row in rows.items()}
    out = {}
    for n, row in rows.items():
        m = got.get(n)
        out[n] = _vr_obs(row) if m is None else VrObs(row.name, bool(row.present), row.state,
                                                      row.daemon_setpoint_pps, m[0], m[1], m[2])
    return out


def _fixed_timers(st: RouterState, settings: Settings, act: ActivationState) -> tuple[tuple[float, float], ...]:
    """The timers of a router's fixed point (``st.fixed``), computed at its first use (most fixed points of a
    fleet whose rates move are never used: the next measurement differs) from the inputs, found the same."""
    assert st.fixed is not None
    head, rows, timers = st.fixed
    if timers is None:
        timers = _timers(settings, act, rows)
        st.fixed = (head, rows, timers)
    return timers


def _vr_obs(row: VrRow) -> VrObs:
    return VrObs(row.name, bool(row.present), row.state, row.daemon_setpoint_pps, row.forwarded_pps,
                 row.offered_pps, row.saturated)


def _command_detail(cmd: Command) -> dict[str, Any]:
    return {"cmd": cmd.cmd, **cmd.options()}


def _shows_applied(cmd: Command, vr: dict[str, Any] | None) -> bool:
    """Whether a VR as the daemon reports it (None: not listed) shows the command's effect."""
    if cmd.cmd == "deactivate":
        return vr is None or vr["state"] == "inactive"
    if vr is None:
        return False
    if cmd.cmd in ("vr_off", "vr_on"):  # the punishments of issue 48: off = not present
        return vr.get("present") is (cmd.cmd == "vr_on")
    if cmd.cmd == "early_drop":  # only a 'list' reply says (a sample does not)
        ed = vr.get("early_drop")
        return isinstance(ed, dict) and cmd.on is not None and ed.get("on") is cmd.on
    state, sp = vr["state"], vr["setpoint_pps"]
    if cmd.cmd in ("activate", "setpoint"):
        return (state != "inactive" and sp is not None and cmd.setpoint_pps is not None
                and abs(sp - cmd.setpoint_pps) <= 1e-9 * cmd.setpoint_pps)
    return state == {"pause": "paused", "resume": "active"}.get(cmd.cmd)


#: While more than this share of the streams with a sample (and at least :data:`BEHIND_MIN` of them) are late at
#: once, the engine takes itself to be behind (its own link thread is late with them: a fleet seldom falls silent
#: a fifth at a time) and sheds load rather than adding it (:meth:`Engine.run_cycle`, :meth:`Engine.probe_silent`).
BEHIND_SHARE = 0.2
BEHIND_MIN = 20
#: While behind, a router whose stream's newest sample is at most this many periods old waits for its next
#: sample instead of being sent ``list`` or probed: a ``list`` costs the engine several times a sample.
BEHIND_WAIT_PERIODS = 3.0


def behind(late: int, streams: int) -> bool:
    """Whether ``late`` streams of the ``streams`` that have a sample say the engine itself is behind."""
    return late >= BEHIND_MIN and late > BEHIND_SHARE * streams


@dataclass(slots=True)
class RouterState:
    """What the engine keeps of one router between its measurements (one object per router of its shard,
    made when the router is first handled, dropped when a cycle no longer lists it).

    Attributes
    ----------
    backoff : (float, float) or None
        While unreachable: (clock seconds of the next attempt, the current backoff, seconds).
    vr_set : frozenset or None
        The VRs its last ``list`` named (None: never listed).
    sample_names : (list, frozenset) or None
        Its newest sample's VRs (the very list) and their names.
    cmds_done_s : float
        When its last commands' replies arrived (monotonic; -inf: never).
    probed_arrival_s : float or None
        The arrival time of the sample whose silence it was last probed for (once per silence).
    fixed : tuple or None
        The inputs of its last plan (:func:`_same_inputs`'s head, the VRs' rows as the store gave them)
        and the timers that ran (:func:`_timers`; None until first needed: :func:`_fixed_timers`), if that
        plan was a fixed point (nothing to save, send or record): the same inputs again, before any of
        those timers reaches its hold, give the same nothing, and the router is not planned.  The head holds
        the router's live measurements' key (:func:`_live_key`): the rows' own may be older.
    block : tuple or None
        Its plan inputs in columns, kept with the rows they were made from (:func:`_plan_block`).
    unanswered : (list of Command, str) or None
        The commands of its last exchange whose replies were lost (the daemon may have applied them),
        and the link's error: its next measurement tells which took effect (:meth:`Engine._confirm`).
    measured_at_s : float or None
        When its last measurement reached the store (monotonic).
    """

    backoff: tuple[float, float] | None = None
    vr_set: frozenset[str] | None = None
    sample_names: tuple[list, frozenset[str]] | None = None
    cmds_done_s: float = -math.inf
    probed_arrival_s: float | None = None
    fixed: tuple[tuple, dict[str, VrRow], tuple[tuple[float, float], ...] | None] | None = None
    block: tuple | None = None
    unanswered: tuple[list[Command], str] | None = None
    measured_at_s: float | None = None


class Engine:
    """Runs the policies every ``period_s`` seconds in a background thread (or one cycle on demand).

    Each cycle sends ``list`` to every registered router that is not already being handled and not
    waiting out a backoff, all at once through the :class:`~xtc.policer.link.LinkPool` (one event
    loop over every exchange in flight on one kept connection per daemon, each with its own
    deadline, so silent daemons delay no other).  One worker thread takes the replies as they arrive, failures first, in batches of what
    has arrived meanwhile (at most ``batch_size``): it records a batch in one transaction, reads the
    answering routers' state in one, plans each, saves the plans in one, and sends each router's
    commands (setpoints, activation) in one more exchange.  A router that does not answer is marked
    ``unreachable`` at its deadline and retried after ``period_s``, then twice as long each time, up
    to ``max_backoff_s``; one answer resets that.

    Parameters
    ----------
    store : Store
    links : LinkPool
    period_s : float
        Seconds between cycles.
    clock : callable
        Monotonic seconds (default :func:`time.monotonic`); every timer of the policies uses it.
    max_vrs_per_router : int
        Most VRs accepted in one router's ``list`` reply; a longer one is dropped and the router marked.
    on_crash : callable, optional
        Called with the exception when a cycle fails unexpectedly (the service then exits so that
        its supervisor restarts it).
    max_backoff_s : float
        Longest wait between two attempts at an unreachable router, seconds.
    is_leader : callable, optional
        Asked before every background cycle: the cycle runs only while it returns True (several
        policers on one PostgreSQL: only the lock holder's engine polls and commands).  None: always.
    batch_size : int
        Most replies the worker records, plans and saves together (one transaction each for the
        outcomes, the routers' state and the plans).
    samples : SampleStreams, optional
        The daemons' sample streams: a router registered with a ``pub_endpoint`` is subscribed to,
        and while its newest valid sample is at most ``sample_max_age_s`` old and lists the VRs its
        last ``list`` did, the cycle takes its measurements from it instead of sending ``list``.
        None: every router is measured by ``list``.
    sample_max_age_s : float, optional
        Oldest sample a cycle uses, seconds (default 1.5 periods); a router whose stream is silent
        longer is sent ``list`` (and marked at that exchange's deadline if it is dead).
    silence_s, probe_timeout_s : float, optional
        Between cycles, every tenth of a period, a router whose stream has published nothing for
        ``silence_s`` (default 1.25 periods: a sample is due every period) is sent ``list`` at once,
        once per silence, with its own deadline of ``probe_timeout_s`` (default half a period, at
        most the links' timeout): a daemon that died is marked about 1.3-1.85 periods after its
        last sample instead of 2.4-3.4 (the next cycle's stale sample, then a whole timeout), and
        one that answers is measured by the reply as by any ``list``.
        While the engine is behind (:func:`behind`: a fifth of the streams with a sample, and at least
        :data:`BEHIND_MIN`, late at once) neither the cycle nor the probe sends ``list`` to a router whose
        newest sample is at most :data:`BEHIND_WAIT_PERIODS` periods old: it waits for its next sample
        (counted in :attr:`shed`), since a ``list`` costs several times a sample and an engine that fell
        behind would otherwise fall further (docs/design/samples-vs-list.md).
        Also between cycles, at the same tick, a router registered since the last cycle read the
        routers (never heard from: status ``unknown``) is sent its first ``list`` at once, with the
        links' own timeout, rather than at the next cycle (:meth:`contact_new`): one dead from its
        registration is marked about a tenth of a period plus that timeout after it, not up to a
        whole period later.
    shard : (int, int)
        ``(i, n)``: this engine polices only the routers whose :func:`shard_of` is ``i`` of ``n``
        (``engine.shards`` processes share the fleet); ``(0, 1)``: every router.
    snapshot_interval_s : float
        Seconds between two snapshots of the live measurements (:meth:`Store.snapshot`, written by the
        worker between batches, and once more when the engine stops): the routers' measurements live in
        the store's memory, and only decisions, status changes and a VR's discrete changes are written
        as they happen; a crash loses at most this long of measurements (``engine.snapshot_interval_s``).
    live_file : path, optional
        Where the worker publishes the live measurements for the API's processes
        (:class:`~xtc.policer.liveshare.LiveWriter`), every :data:`~xtc.policer.liveshare.PUBLISH_S` (at
        most a period) while batches come; removed when the engine stops.  None: not published.
    """

    def __init__(self, store: Store, links: LinkPool, period_s: float = 1.0, clock: Callable[[], float] = time.monotonic,
                 on_crash: Callable[[BaseException], None] | None = None, max_vrs_per_router: int = 4096,
                 max_backoff_s: float = 30.0, is_leader: Callable[[], bool] | None = None, batch_size: int = 256,
                 samples: SampleStreams | None = None, sample_max_age_s: float | None = None,
                 shard: tuple[int, int] = (0, 1), silence_s: float | None = None,
                 probe_timeout_s: float | None = None, snapshot_interval_s: float = 10.0,
                 live_file: str | None = None):
        if not (shard[1] >= 1 and 0 <= shard[0] < shard[1]):
            raise ValueError(f"shard must be (i, n) with 0 <= i < n, got {shard}")
        self.shard = shard
        self.store = store
        self.snapshot_interval_s = snapshot_interval_s
        self._next_snapshot = time.monotonic() + snapshot_interval_s
        #: Snapshots of the live measurements written (since the start).
        self.snapshots = 0
        self._live_out = LiveWriter(live_file, 2 * period_s + 1.0) if live_file else None
        self._live_every_s = min(PUBLISH_S, period_s)
        self._next_live = 0.0
        self.samples = samples
        self.sample_max_age_s = 1.5 * period_s if sample_max_age_s is None else sample_max_age_s
        self.silence_s = 1.25 * period_s if silence_s is None else silence_s
        links_timeout = getattr(links, "timeout_s", None) or math.inf
        self.probe_timeout_s = min(links_timeout, 0.5 * period_s) if probe_timeout_s is None else probe_timeout_s
        #: Routers sent ``list`` between cycles because their stream fell silent (since the start).
        self.probed = 0
        #: Measurements put off while the engine was behind (since the start): routers a cycle left to wait
        #: for their next sample instead of sending them ``list``; and the cycles and probes (every tenth of a
        #: period) that shed.
        self.shed = 0
        self.shedding = 0
        #: router -> what the engine keeps of it (:class:`RouterState`): this shard's routers handled since
        #: the last cycle read them; a router the cycle no longer lists is dropped whole.
        self._state: dict[str, RouterState] = {}
        self._routers: dict[str, dict[str, Any]] = {}  # the last cycle's routers (this shard's), by name
        #: (the store's router list, this shard's routers as (name, router), their names) (:meth:`_fleet`).
        self._fleet_kept: tuple[list[dict[str, Any]], list[tuple[str, dict[str, Any]]], frozenset[str]] | None = None
        #: This shard's routers the last cycle read, and the new ones :meth:`contact_new` sent ``list`` since.
        self._cycle_names: set[str] = set()
        #: Routers sent their first ``list`` between cycles (since the start).
        self.first_contacts = 0
        #: The router generation read before the routers were last read (by a cycle or :meth:`contact_new`).
        self._contact_gen: str | None = None
        self._settings: Settings | None = None
        self._leading = False  # the last cycle ran (this engine led)
        #: Router measurements taken from a sample stream, and by sending ``list`` (since the start).
        self.sampled = 0
        self.listed = 0
        #: Routers measured whose plan was skipped that way, and routers planned (since the start).
        self.plans_skipped = 0
        self.planned = 0
        #: Of the routers planned, those whose plan the batch's arrays found quiet (:mod:`~xtc.policer.quiet`).
        self.plans_quiet = 0
        self.batch_size = batch_size
        self.is_leader = is_leader
        self.links = links
        self.period_s = period_s
        self.clock = clock
        self.on_crash = on_crash
        self.max_vrs_per_router = max_vrs_per_router
        self.max_backoff_s = max_backoff_s
        self.cycles = 0
        #: Replies dropped because they were not valid (per router, and in all).
        self.bad_replies: dict[str, int] = {}
        self.last_cycle_s: float | None = None
        #: Wall seconds each router took from its ``list`` being sent to its commands' replies (last cycle).
        self.router_s: dict[str, float] = {}
        #: Seconds the worker spent on the last few cycles' store and planning work, and routers handled.
        self.polled = 0
        #: Seconds from each recent cycle's start until its last answering router was handled (planned,
        #: commands answered): the policy cycle's time, newest last (at most 600 cycles).
        self.cycle_s: collections.deque[float] = collections.deque(maxlen=600)
        #: Every cycle time so far as a histogram: ``counts`` per bucket of :data:`CYCLE_BUCKETS_S` and
        #: one above them (not cumulative), ``sum`` of the times, seconds.
        self.cycle_hist: dict[str, Any] = {"counts": [0] * (len(CYCLE_BUCKETS_S) + 1), "sum": 0.0}
        self._cycle: list[float] = [0.0, 0.0]  # the running cycle's start and its last answering router's end
        #: Per recent cycle, the longest time any router went between two of its measurements reaching the
        #: store (seconds, newest last, at most 600 cycles): every period for a healthy router is <= 1.5 periods.
        self.gap_s: collections.deque[float] = collections.deque(maxlen=600)
        self._gap = 0.0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._worker: threading.Thread | None = None
        self._work: queue.PriorityQueue = queue.PriorityQueue()
        self._seq = itertools.count()
        #: router -> the token of its measurement under way (:meth:`_claim`): one object, not an Event, per
        #: router and cycle; the worker removes a batch's and notifies ``_handled`` once.
        self._busy: dict[str, object] = {}
        self._busy_lock = threading.Lock()
        self._handled = threading.Condition(self._busy_lock)

    @property
    def bad_samples(self) -> int:
        """Sample messages dropped as not valid since the start."""
        return sum(self.samples.bad.values()) if self.samples is not None else 0

    @property
    def link_stats(self) -> dict[str, int]:
        """The link pool's counters (:meth:`~xtc.policer.link.LinkPool.stats`)."""
        return self.links.stats()

    # ------------------------------------------------------------------------------- thread
    def start(self) -> None:
        self._ensure_worker()
        self._thread = threading.Thread(target=self._run, name="policer-engine", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the cycles; let the exchanges in flight end (their replies, or their timeouts, come back
        through the worker: the commands of a batch whose plans were saved are sent and answered, not
        dropped with the links); then stop the worker, close the links and the sample streams."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._worker is not None:
            deadline = time.monotonic() + getattr(self.links, "timeout_s", 5.0) + 1.0
            with self._handled:
                while self._busy and self.error is None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._handled.wait(left)
            self._work.put((-1, 0, None))
            self._worker.join(timeout=10)
        self.links.close()
        if self.samples is not None:
            self.samples.close()

    def _ensure_worker(self) -> None:
        if self._worker is None:
            self._worker = threading.Thread(target=self._work_loop, name="policer-worker", daemon=True)
            self._worker.start()

    def cycle_phase_s(self) -> float:
        """Where in the period this engine's cycles start, seconds: 0 for one engine; shard ``i`` of
        ``n`` at ``i / n`` of the period on ``CLOCK_MONOTONIC`` (system-wide, so the shards' processes
        agree), so that the shards' cycles are spread over the period instead of starting together."""
        i, n = self.shard
        return self.period_s * i / n if n > 1 else 0.0

    def _next_start(self, after: float) -> float:
        """The first cycle start at or after ``after`` (monotonic seconds) at this engine's phase."""
        phase = self.cycle_phase_s()
        return after + (phase - after) % self.period_s

    def _run(self) -> None:
        sharded = self.shard[1] > 1
        next_t = self._next_start(time.monotonic()) if sharded else time.monotonic()
        self._stop.wait(max(0.0, next_t - time.monotonic()))
        while not self._stop.is_set():
            start = time.monotonic()
            try:
                self._leading = self.is_leader is None or self.is_leader()
                if self._leading:
                    self.run_cycle()
            except BaseException as e:  # a bug: stop, and let the service exit
                self._crash(e)
                return
            if sharded:
                # the phase's first start at least half a period after this one: a period on after a
                # start on time; after an overrun at once, and the one after it back on the phase
                next_t = self._next_start(start + 0.5 * self.period_s)
            else:
                next_t = max(next_t + self.period_s, time.monotonic())  # overran: the next at once
            # until then, every tenth of a period: routers registered meanwhile are sent their first
            # 'list', and streams that fall silent are probed
            while not self._stop.wait(max(0.0, min(next_t - time.monotonic(), 0.1 * self.period_s))):
                if time.monotonic() >= next_t:
                    break
                if self._leading:
                    try:
                        self.contact_new()
                        if self.samples is not None:
                            self.probe_silent()
                    except BaseException as e:  # a bug: stop, and let the service exit
                        self._crash(e)
                        return

    def _crash(self, e: BaseException) -> None:
        if self.error is None:
            self.error = e
            log.critical("engine cycle failed", exc_info=e)
            self._stop.set()
            if self.on_crash is not None:
                self.on_crash(e)

    # -------------------------------------------------------------------------------- cycle
    def run_cycle(self, wait: bool = False) -> None:
        """Start one cycle for every registered router whose previous cycle has finished.

        ``wait``: return only when all of them are done (for tests and tools).
        """
        self._ensure_worker()
        if self._cycle[1] > self._cycle[0]:
            took = self._cycle[1] - self._cycle[0]
            self.cycle_s.append(took)
            h = self.cycle_hist
            h["counts"][bisect.bisect_left(CYCLE_BUCKETS_S, took)] += 1
            h["sum"] += took
        if self._gap > 0:
            self.gap_s.append(self._gap)
            self._gap = 0.0
        self._cycle = [time.monotonic(), 0.0]
        settings = self.store.settings()
        now = self.clock()
        routers, names = self._fleet()
        self._contact_gen = self.store.engine_routers_generation  # the generation read before that list
        if settings == self._settings:  # the same object while the settings are the same: compared once a cycle,
            settings = self._settings  # not once a router (a router's fixed point holds the settings it was planned by)
        self._settings = settings
        # The routers not busy and not waiting out a backoff at ``now``, claimed under one lock with this cycle's
        # token (what :meth:`_claim` does a router at a time, for the measurements between cycles).
        # (Three lists, not a tuple a router: the cycle's thread allocates little, and so triggers few of the
        # garbage collector's passes over the whole heap.)
        state = self._state
        token = object()
        claimed: list[str] = []
        claimed_r: list[dict[str, Any]] = []
        claimed_st: list[RouterState | None] = []
        busy = self._busy
        with self._busy_lock:
            for name, r in routers:
                if name in busy:
                    continue
                st = state.get(name)
                if not _backing_off(st, now):
                    busy[name] = token
                    claimed.append(name)
                    claimed_r.append(r)
                    claimed_st.append(st)
        exchanges: list[tuple] = []
        sampled: list[tuple] = []  # handed to the worker a batch at a time, not one queue entry a router
        samples = self.samples
        latest = samples.latest_all() if samples is not None else {}
        max_age, batch_size, monotonic = self.sample_max_age_s, self.batch_size, time.monotonic
        # Behind (many streams late at once): a router whose stream is late but not silent waits for its next
        # sample instead of a 'list', which would cost more than the sample it stands for.
        wait_from = monotonic() - BEHIND_WAIT_PERIODS * self.period_s
        stale_from = monotonic() - max_age
        late = sum(1 for got in latest.values() if wait_from <= got[0] < stale_from)
        waits = behind(late, len(latest))
        released: list[str] = []
        for name, r, st in zip(claimed, claimed_r, claimed_st):
            got = latest.get(name)
            if got is not None and r["pub_endpoint"]:
                t = monotonic()
                if waits and wait_from <= got[0] and t - got[0] > max_age:
                    released.append(name)
                    continue
                if t - got[0] <= max_age:  # else a stale or silent stream
                    if st is None:
                        st = self._st(name)
                    vrs = self._sample_vrs(st, got)
                    if vrs is not None:  # measured by the router's sample stream: no 'list'
                        self.sampled += 1
                        sampled.append(("samples", r, settings, now, vrs, t))
                        if len(sampled) >= batch_size:
                            self._work.put((1, next(self._seq), ("batch", sampled)))
                            sampled = []
                        continue
            exchanges.append(self._list(r, settings, now))
        if sampled:
            self._work.put((1, next(self._seq), ("batch", sampled)))
        if released:
            self.shed += len(released)
            self.shedding += 1
            with self._busy_lock:
                for name in released:
                    if busy.get(name) is token:
                        del busy[name]
        self.links.exchange_many(exchanges)
        self._cycle_names = set(names)
        for gone in state.keys() - names:
            state.pop(gone, None)
        self.store.keep_states(names)
        if wait:
            with self._handled:
                while any(busy.get(n) is token for n in claimed):
                    if not self._handled.wait(0.1) and self.error is not None:
                        raise RuntimeError("engine failed") from self.error
        self.cycles += 1
        self.last_cycle_s = now

    def _fleet(self) -> tuple[list[tuple[str, dict[str, Any]]], frozenset[str]]:
        """This shard's routers, as ``(name, router)`` in the store's order, and their names.  Made again, and
        the link pool's and the sample streams' expectations with them, only when the store's list is another
        (:meth:`Store.engine_routers` gives the very list while no router was added, removed or changed)."""
        routers = self.store.engine_routers()
        kept = self._fleet_kept
        if kept is not None and kept[0] is routers:
            return kept[1], kept[2]
        mine = [(r["name"], r) for r in routers if self._mine(r["name"])]
        names = frozenset(n for n, _ in mine)
        # One kept connection per daemon endpoint: said in one line when the open-files limit is short.
        self.links.expect(len({(r["endpoint"], r["curve_server_key"] or None) for _, r in mine}))
        if self.samples is not None:
            self.samples.want({n: (r["pub_endpoint"], r["curve_server_key"], r["endpoint"])
                               for n, r in mine if r["pub_endpoint"]})
            self._routers = {n: r for n, r in mine if r["pub_endpoint"]}
        self._fleet_kept = (routers, mine, names)
        return mine, names

    def contact_new(self) -> int:
        """Send ``list`` now, with the links' own timeout, to every router of this shard that was
        registered (or registered again) after the last cycle read the routers and is still never heard
        from (status ``unknown``), unless busy or waiting out a backoff; each once (the next cycle takes
        it from there).  The reply, or the failure, goes through the worker as a cycle's ``list`` does.
        Without this its first ``list`` waited for the next cycle, up to a period.  Returns how many were
        sent (the background loop calls this between cycles; tests call it directly)."""
        if self._settings is None:
            return 0  # no cycle yet: the first one reaches every router
        # A router registered (or registered again) since the routers were last read here moved the router
        # generation (Store.routers_generation) after the one read before them: while it has not moved, none
        # is new (one row read ten times a period instead of every never-heard router's).
        gen = self.store.routers_generation()
        if gen == self._contact_gen:
            return 0
        self._ensure_worker()
        settings, now = self._settings, self.clock()
        exchanges: list[tuple] = []
        for r in self.store.engine_routers(never_heard=True):
            name = r["name"]
            if name in self._cycle_names or not self._mine(name):
                continue
            self._cycle_names.add(name)
            if self._claim(name, now) is None:
                continue
            self.first_contacts += 1
            exchanges.append(self._list(r, settings, now))
        self._contact_gen = gen  # read before these routers: what came after it moves it again
        self.links.exchange_many(exchanges)
        return len(exchanges)

    def probe_silent(self) -> int:
        """Send ``list`` now, with the deadline ``probe_timeout_s``, to every router of the last cycle
        whose stream has published nothing for ``silence_s`` (once per silence; not to one never heard
        from, busy, or waiting out a backoff).  The reply, or the failure, goes through the worker as a
        cycle's ``list`` does.  Returns how many were sent (the background loop calls this between
        cycles; tests call it directly)."""
        if self.samples is None or self._settings is None:
            return 0
        self._ensure_worker()
        settings, now = self._settings, self.clock()
        exchanges: list[tuple] = []
        silent = self.samples.older_than(time.monotonic() - self.silence_s)
        wait_from = time.monotonic() - BEHIND_WAIT_PERIODS * self.period_s
        late = sum(1 for _, arrived in silent if arrived >= wait_from)
        if behind(late, self.samples.streams()):  # behind: only the streams silent for longer are probed
            self.shedding += 1
            silent = [(n, a) for n, a in silent if a < wait_from]
        for name, arrived in silent:
            r = self._routers.get(name)
            if r is None or self._st(name).probed_arrival_s == arrived or self._claim(name, now) is None:
                continue
            self._st(name).probed_arrival_s = arrived
            self.probed += 1
            exchanges.append(self._list(r, settings, now, self.probe_timeout_s))
        self.links.exchange_many(exchanges)
        return len(exchanges)

    def _st(self, name: str) -> RouterState:
        """The router's :class:`RouterState` (made at its first use)."""
        st = self._state.get(name)
        if st is None:  # setdefault: the cycle's thread and the worker may both make it, one is kept
            st = self._state.setdefault(name, RouterState())
        return st

    def _mine(self, name: str) -> bool:
        """Whether this engine polices the router (its shard; every router without shards)."""
        i, n = self.shard
        return n == 1 or shard_of(name, n) == i

    def _claim(self, name: str, now: float) -> object | None:
        """Mark a router busy for a measurement (a token the worker removes when it is handled, then
        notifying :attr:`_handled`), unless it waits out a backoff at ``now`` (clock seconds) or is busy
        already (then None)."""
        if _backing_off(self._state.get(name), now):
            return None
        with self._busy_lock:
            if name in self._busy:
                return None
            token = self._busy[name] = object()
        return token

    def _list(self, r: dict[str, Any], settings: Settings, now: float, timeout_s: float | None = None) -> tuple:
        """The ``list`` exchange of a router (for :meth:`LinkPool.exchange_many`), its reply to the worker."""
        self.listed += 1
        return (r["name"], r["endpoint"], r["curve_server_key"], [{"cmd": "list"}],
                lambda _n, res, r=r, t0=time.monotonic(): self._put(("list", r, settings, now, res, t0)), timeout_s)

    def _sampled_vrs(self, r: dict[str, Any]) -> list[dict[str, Any]] | None:
        """The router's VRs from its newest sample if that can stand for a ``list``: at most
        ``sample_max_age_s`` old and naming the VRs the router's last ``list`` named; else None (a router
        at a time: :meth:`run_cycle` does the same over the streams' samples read at once)."""
        if self.samples is None or not r["pub_endpoint"]:
            return None
        got = self.samples.latest(r["name"])
        if got is None or time.monotonic() - got[0] > self.sample_max_age_s:
            return None  # never seen, or a stale or silent stream
        return self._sample_vrs(self._st(r["name"]), got)

    def _sample_vrs(self, st: RouterState, got: tuple[float, Any]) -> Any:
        """The VRs of a router's newest sample ``got`` (arrival time, VRs; at most ``sample_max_age_s`` old) if it
        can stand for a ``list``: it arrived after the replies to the router's last commands and names the VRs
        the router's last ``list`` named; else None.  ``st``: the router's :class:`RouterState`."""
        if got[0] <= st.cmds_done_s:
            return None  # published before the last commands took effect: it would undo them
        known = st.vr_set
        names = st.sample_names
        if names is None or names[0] is not got[1]:  # a new message: its VR names (the same list: the same names)
            vrs = got[1]
            if names is not None and isinstance(vrs, SampleRows) and getattr(names[0], "names", None) is vrs.names:
                names = st.sample_names = (vrs, names[1])  # (the very names of the last one: xtc-samples/3 keeps them)
            else:
                names = st.sample_names = (vrs, frozenset(vrs.names if isinstance(vrs, SampleRows) else (v["vr"] for v in vrs)))
        if known is None or names[1] != known:
            return None  # never listed, or the VR set changed: 'list' tells everything
        if names[1] is not known:  # equal sets: the one object kept (a set of 16 names is 728 bytes)
            st.sample_names = (names[0], known)
        return got[1]

    def _put(self, item: tuple) -> None:
        # Failures first: marking a router unreachable is cheap and must not wait behind planning.
        failed = any(isinstance(x, (LinkDown, DaemonRefused)) for x in item[-2])
        self._work.put((0 if failed else 1, next(self._seq), item))

    def _work_loop(self) -> None:
        while True:
            first = self._work.get()
            items: list[Any] = []
            self._take(items, first[2])
            while len(items) < self.batch_size:  # whatever else has arrived meanwhile, failures first
                try:
                    entry = self._work.get_nowait()
                except queue.Empty:
                    break
                if first[0] == 0 and entry[0] != 0:
                    # A batch of failures takes failures only: their marks are committed in a small
                    # transaction of their own, not after a batch of replies is recorded.
                    self._work.put(entry)
                    break
                self._take(items, entry[2])
            stop = None in items
            items = [it for it in items if it is not None]
            try:
                busy = self._handle_batch(items)
            except BaseException as e:
                self._crash(e)
                busy = set()
            with self._handled:
                for n in {self._item_router(it) for it in items} - busy:
                    self._busy.pop(n, None)
                self._handled.notify_all()
            if stop or self.store.snapshot_pending or time.monotonic() >= self._next_snapshot:
                self._snapshot(final=stop)
            if self._live_out is not None:
                self._publish_live(stop)
            if stop:
                return

    def _publish_live(self, stop: bool) -> None:
        """Publish the live measurements for the API (the worker's thread: the table is its own) when due;
        on the way out, remove them.  A failure is logged, never fatal: the API then shows the snapshot."""
        out = self._live_out
        assert out is not None
        try:
            if stop:
                out.remove()
            elif time.monotonic() >= self._next_live:
                self._next_live = time.monotonic() + self._live_every_s
                out.publish(self.store.live, time.time())
        except OSError as e:
            log.warning("live measurements not published to %s: %s", out.path, e)

    @staticmethod
    def _take(items: list[Any], item: tuple | None) -> None:
        """Add a queue entry's item to a batch: a cycle's batch of sampled routers adds each of them."""
        if item is not None and item[0] == "batch":
            items.extend(item[1])
        else:
            items.append(item)

    def _snapshot(self, final: bool = False) -> None:
        """Write the live measurements (the worker's thread: the store's live values are its own), at
        most :data:`SNAPSHOT_ROWS` VRs' rows after each batch until the snapshot is written (all at once
        on the way out, ``final``).  A failure is a crash as a batch's is; on the way out one after a
        crash is not tried."""
        if final and self.error is not None:
            return
        try:
            if not self.store.snapshot_pending:  # a new one: the next is due an interval from its start
                self._next_snapshot = time.monotonic() + self.snapshot_interval_s
            if final:
                while self.store.snapshot(SNAPSHOT_ROWS) or self.store.snapshot_pending:
                    pass
                self.store.snapshot()
            else:
                self.store.snapshot(SNAPSHOT_ROWS)
            if not self.store.snapshot_pending:
                self.snapshots += 1
                # A snapshot's interval of samples, batches and plans freed: the C library's free pages go
                # back (a few ms; about 20 KB per router of resident memory, docs/design/policer-memory.md).
                release_free_heap()
        except BaseException as e:
            if not final:
                self._crash(e)
            else:
                log.warning("last snapshot of the measurements not written: %s", e)

    @staticmethod
    def _item_router(item: tuple) -> str:
        return item[1] if item[0] == "cmds" else item[1]["name"]

    def _handle_batch(self, items: list[tuple]) -> set[str]:
        """Record a batch of replies (one transaction), plan the routers that answered ``list`` (one read,
        one write), send their commands.  Returns the routers whose commands are in flight (still busy)."""
        outcomes: list[ExchangeOutcome] = []
        polled: list[tuple[dict[str, Any], Settings, float, float, RouterState]] = []
        finished: list[tuple[str, float]] = []  # (router, t0): handled to the end in this batch
        for item in items:
            if item[0] == "list":
                _, r, settings, now, results, t0 = item
                name, result = r["name"], results[0]
                if isinstance(result, (LinkDown, DaemonRefused)):  # a BadReply too
                    outcomes.append(self._failed(name, result))
                    continue
                try:
                    vrs = parse_vr_list(result, self.max_vrs_per_router)
                except BadReply as e:
                    outcomes.append(self._failed(name, e))
                    continue
                st = self._st(name)
                st.backoff = None
                st.vr_set = frozenset(sys.intern(v["vr"]) for v in vrs)  # (one string a name: _kept_row)
                outcomes.append(ExchangeOutcome(name, "reachable", None, vrs=vrs, records=self._confirm(name, vrs, st)))
                polled.append((r, settings, now, t0, st))
            elif item[0] == "samples":  # validated as it arrived (SampleStreams)
                _, r, settings, now, vrs, t0 = item
                st = self._st(r["name"])
                st.backoff = None
                outcomes.append(ExchangeOutcome(r["name"], "reachable", None, vrs=vrs, records=self._confirm(r["name"], vrs, st)))
                polled.append((r, settings, now, t0, st))
            else:
                _, name, cmds, results, t0 = item
                self._st(name).cmds_done_s = time.monotonic()
                outcomes.append(self._commands_outcome(name, cmds, results))
                self.router_s[name] = time.monotonic() - t0
                if outcomes[-1].status is None:
                    finished.append((name, t0))
        prev = self.store.record_outcomes(outcomes) if outcomes else {}
        polled = [p for p in polled if prev.get(p[0]["name"]) is not None]  # removed meanwhile: not planned
        t_rec = time.monotonic()
        for p in polled:
            st = p[4]
            if st.measured_at_s is not None:
                self._gap = max(self._gap, t_rec - st.measured_at_s)
            st.measured_at_s = t_rec
        self.polled += len(polled)
        states = self.store.plan_states([p[0]["name"] for p in polled], recorded=True) if polled else {}
        live = self.store.live
        plans, sends = [], []
        todo = []
        for r, settings, now, t0, st in polled:
            name = r["name"]
            if name not in states:
                continue
            stored, rows = states[name]
            pending = stored.pending_since_s
            act = stored if pending is None or pending <= now else ActivationState(stored.on, now)  # (_not_after)
            head = (settings, r["capacity_pps"], r["control_mode"], act.on, act.pending_since_s, _live_key(live, name))
            fixed = st.fixed
            if fixed is not None and _same_inputs(fixed, head, rows) and all(
                    now - since < hold for since, hold in _fixed_timers(st, settings, act)):
                # The same inputs as a plan that changed nothing, and no timer has reached its hold: the same again.
                self.plans_skipped += 1
                finished.append((name, t0))
                continue
            todo.append((r, settings, now, t0, act, rows, head, st, stored))
        quiet = _quiet_demands(todo, live)
        for r, settings, now, t0, act, rows, head, st, stored in todo:
            name = r["name"]
            self.planned += 1
            demand = quiet.get(name)
            if demand is not None:
                # The policy's arithmetic over the batch's arrays says this plan changes nothing (xtc.policer.quiet):
                # recorded as plan_router's would be: nothing saved (its demand, a measurement, is kept live and
                # written by the snapshot).
                self.plans_quiet += 1
                st.fixed = (head, rows, None)
                live.set_demand(name, demand)  # a measurement: in the snapshot
                if act != stored:  # a pending time from before a reboot, moved to now: saved
                    plans.append((name, act, demand, {}, []))
                finished.append((name, t0))
                continue
            rin = RouterInput(
                name=name, capacity_pps=r["capacity_pps"], control_mode=r["control_mode"], activation=act,
                vrs=_observed(rows, live, name),
                policies={n: _vr_policy(row, now) for n, row in rows.items()},
            )
            plan = plan_router(settings, rin, now)
            per_vr = _vr_changes(plan, rows)
            if not per_vr and not plan.commands and not plan.events and plan.activation == act:
                st.fixed = (head, rows, None)
            else:
                st.fixed = None
            live.set_demand(name, plan.demand_pps)
            if per_vr or plan.events or plan.commands or plan.activation != stored:
                # a decision, or commands (sent only once the save has checked this engine still leads): saved now
                plans.append((name, plan.activation, plan.demand_pps, per_vr,
                              [(e.kind, e.vr, e.detail) for e in plan.events]))
            if plan.commands:
                sends.append((r, list(plan.commands), t0))
            else:
                finished.append((name, t0))
        self.store.save_plans(plans)  # NotLeader: nothing was sent, the engine stops
        busy = {r["name"] for r, _, _ in sends}
        self.links.exchange_many([
            (r["name"], r["endpoint"], r["curve_server_key"], [{"cmd": c.cmd, **c.fields()} for c in cmds],
             lambda _n, res, name=r["name"], cmds=cmds, t0=t0: self._put(("cmds", name, cmds, res, t0)))
            for r, cmds, t0 in sends])
        if finished:
            end = time.monotonic()
            for name, t0 in finished:
                self.router_s[name] = end - t0
            self._cycle[1] = end
        return busy

    def _failed(self, name: str, err: BaseException) -> ExchangeOutcome:
        """The outcome of an exchange that failed (no answer, a refusal, a reply dropped); backoff updated."""
        msg = str(err)
        if isinstance(err, BadReply):
            self.bad_replies[name] = self.bad_replies.get(name, 0) + 1
            log.warning("router %s: reply dropped: %s", name, msg)
            msg = "invalid reply dropped: " + msg
        now = self.clock()
        st = self._st(name)
        prev_backoff = st.backoff[1] if st.backoff is not None else 0.0
        backoff = min(self.max_backoff_s, max(self.period_s, 2 * prev_backoff))
        st.backoff = (now + backoff - 0.5 * self.period_s, backoff)
        return ExchangeOutcome(name, "unreachable", msg)

    def _commands_outcome(self, name: str, cmds: list[Any], results: list[Any]) -> ExchangeOutcome:
        """The audit records of a router's command results; unreachable if the exchange failed."""
        records = []
        st = self._st(name)
        st.unanswered = None
        for i, (cmd, res) in enumerate(zip(cmds, results)):
            detail = _command_detail(cmd)
            if isinstance(res, DaemonRefused):
                records.append(("command_refused", cmd.vr, {**detail, "code": res.code, "error": res.message}))
            elif isinstance(res, LinkDown):  # a BadReply too
                # Sent, not answered: the daemon may have applied it (a reply lost or late) or not.
                st.unanswered = (list(cmds[i:]), str(res))
                out = self._failed(name, res)
                out.records = records
                return out
            else:
                records.append((cmd.cmd, cmd.vr, detail))
        return ExchangeOutcome(name, None, records=records)

    def _confirm(self, name: str, vrs: list[dict[str, Any]],
                 st: RouterState | None = None) -> list[tuple[str, str | None, dict[str, Any]]]:
        """The audit records of the router's commands whose replies were lost, now that a measurement
        newer than them shows what the daemon holds: a command it shows applied is recorded as its own
        kind (``reply_lost``: true), one it does not as ``command_unanswered`` (the plan sends what is
        still wanted again, recorded on its own).  ``st``: the router's :class:`RouterState`, when the caller has it."""
        if st is None:
            st = self._st(name)
        got, st.unanswered = st.unanswered, None
        if got is None:
            return []
        cmds, error = got
        by_vr = {v["vr"]: v for v in vrs}
        records: list[tuple[str, str | None, dict[str, Any]]] = []
        for cmd in cmds:
            detail = _command_detail(cmd)
            if _shows_applied(cmd, by_vr.get(cmd.vr)):
                records.append((cmd.cmd, cmd.vr, {**detail, "reply_lost": True}))
            else:
                records.append(("command_unanswered", cmd.vr, {**detail, "error": error}))
        return records
