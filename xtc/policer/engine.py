"""The thin layer that applies the policies: poll the daemons, plan, push commands, record.

Every ``period_s`` the engine asks each registered router's daemon for its VRs (``list``), records
what it saw, runs :func:`xtc.policer.planner.plan_router` on the stored state, saves the new state and
the decisions, and sends the commands that bring the daemon to the wanted state.  Routers are handled
in parallel, so one that does not answer (marked ``unreachable``, with the error) delays no other;
when it answers again the same reconciliation catches it up.

A daemon's reply is untrusted: a reply that is not a valid manager-API reply, or a ``list`` whose
VRs do not validate against the daemon's published :class:`xtc.daemon.api.Instance` model (or name
a VR the API cannot address, or list more than ``max_vrs_per_router``), is dropped whole and
counted (:attr:`Engine.bad_replies`); the router is marked ``unreachable`` with the problem as its
``last_error``, and every other router goes on.

Every duration the policies measure (activation hold, punishment and restoration timers) is on
``clock``, a monotonic clock (``CLOCK_MONOTONIC`` is system-wide, so the timers stored in the
database survive a restart of the policer; a timer stored in the future of the clock, i.e. from
before a reboot, restarts from now).  Wall time is used only for the records' timestamps.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from .link import BadReply, DaemonRefused, LinkDown, LinkPool, parse_vr_list
from .planner import RouterInput, Settings, VrObs, VrPolicy, plan_router
from .policy import ActivationState, MisbehaviourState
from .store import Store

__all__ = ["Engine"]

log = logging.getLogger("xtc.policer.engine")


def _not_after(t: float | None, now: float) -> float | None:
    """A stored timer start; one in the future of the monotonic clock (from before a reboot) restarts now."""
    return None if t is None else min(t, now)


def _vr_policy(row: dict[str, Any], now: float) -> VrPolicy:
    return VrPolicy(
        weight=row["sla_weight"] if row["sla_weight"] is not None else 1.0,
        min_pps=row["sla_min_pps"] if row["sla_min_pps"] is not None else 0.0,
        max_pps=row["sla_max_pps"] if row["sla_max_pps"] is not None else math.inf,
        manual_setpoint_pps=row["manual_setpoint_pps"],
        misbehaviour=MisbehaviourState(row["punish_level"], _not_after(row["punish_bad_since_s"], now),
                                       _not_after(row["punish_good_since_s"], now)),
        punish_base_pps=row["punish_base_pps"],
        derived_setpoint_pps=row["derived_setpoint_pps"],
    )


def _vr_obs(row: dict[str, Any]) -> VrObs:
    return VrObs(row["name"], bool(row["present"]), row["state"], row["daemon_setpoint_pps"], row["measured_pps"],
                 row["offered_pps"])


class Engine:
    """Runs the policies every ``period_s`` seconds in a background thread (or one cycle on demand).

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
    """

    def __init__(self, store: Store, links: LinkPool, period_s: float = 1.0, clock: Callable[[], float] = time.monotonic,
                 on_crash: Callable[[BaseException], None] | None = None, max_workers: int = 8,
                 max_vrs_per_router: int = 4096):
        self.store = store
        self.links = links
        self.period_s = period_s
        self.clock = clock
        self.on_crash = on_crash
        self.max_vrs_per_router = max_vrs_per_router
        self.cycles = 0
        #: Replies dropped because they were not valid (per router, and in all).
        self.bad_replies: dict[str, int] = {}
        self._count_lock = threading.Lock()
        self.last_cycle_s: float | None = None
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._inflight: dict[str, Future] = {}
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="policer-link")

    # ------------------------------------------------------------------------------- thread
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="policer-engine", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._pool.shutdown(wait=True)
        self.links.close()

    def _run(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            try:
                self.run_cycle()
            except BaseException as e:  # a bug: stop, and let the service exit
                self.error = e
                log.critical("engine cycle failed", exc_info=True)
                if self.on_crash is not None:
                    self.on_crash(e)
                return
            next_t += self.period_s
            delay = next_t - time.monotonic()
            if delay < 0:
                next_t = time.monotonic()
                delay = 0
            self._stop.wait(delay)

    # -------------------------------------------------------------------------------- cycle
    def run_cycle(self, wait: bool = False) -> None:
        """Start one cycle for every registered router whose previous cycle has finished.

        Routers are handled in parallel and independently: one whose daemon hangs holds up only
        itself (its next cycle starts when its request has timed out).  ``wait``: return only
        when all of them are done (for tests and tools).
        """
        settings = self.store.settings()
        now = self.clock()
        routers = self.store.list_routers(include_removed=False)
        started = []
        for r in routers:
            prev = self._inflight.get(r["name"])
            if prev is not None and not prev.done():
                continue
            f = self._pool.submit(self.cycle_router, r, settings, now)
            f.add_done_callback(self._check_failure)
            self._inflight[r["name"]] = f
            started.append(f)
        if wait:
            for f in started:
                f.result()
        self.cycles += 1
        self.last_cycle_s = now

    def _check_failure(self, f: Future) -> None:
        e = f.exception()
        if e is not None and self.error is None:
            self.error = e
            log.critical("router cycle failed", exc_info=e)
            self._stop.set()
            if self.on_crash is not None:
                self.on_crash(e)

    def _unreachable(self, name: str, err: str) -> None:
        prev = self.store.set_router_status(name, "unreachable", err, seen=False)
        if prev is not None and prev != "unreachable":
            self.store.audit("router_unreachable", "policer", name, None, {"error": err})

    def _bad_reply(self, name: str, err: str) -> None:
        with self._count_lock:
            self.bad_replies[name] = self.bad_replies.get(name, 0) + 1
        log.warning("router %s: reply dropped: %s", name, err)
        self._unreachable(name, "invalid reply dropped: " + err)

    def cycle_router(self, r: dict[str, Any], settings: Settings, now: float) -> None:
        name = r["name"]
        link = self.links.get(name, r["endpoint"], r["curve_server_key"])
        try:
            vrs = parse_vr_list(link.call("list"), self.max_vrs_per_router)
        except BadReply as e:
            self._bad_reply(name, str(e))
            return
        except (LinkDown, DaemonRefused) as e:
            self._unreachable(name, str(e))
            return
        prev = self.store.set_router_status(name, "reachable", None, seen=True)
        if prev is None:  # removed meanwhile
            return
        if prev == "unreachable":
            self.store.audit("router_reachable", "policer", name, None, {})
        self.store.record_poll(name, vrs)
        act, rows = self.store.router_state(name)
        act = ActivationState(act.on, _not_after(act.pending_since_s, now))
        rin = RouterInput(
            name=name, capacity_pps=r["capacity_pps"], control_mode=r["control_mode"], activation=act,
            vrs={n: _vr_obs(row) for n, row in rows.items()},
            policies={n: _vr_policy(row, now) for n, row in rows.items()},
        )
        plan = plan_router(settings, rin, now)
        per_vr = {}
        for n, p in plan.policies.items():
            want = plan.wanted.get(n, (None, None))
            per_vr[n] = {"derived_setpoint_pps": p.derived_setpoint_pps, "misbehaviour": p.misbehaviour,
                         "punish_base_pps": p.punish_base_pps, "wanted_state": want[0], "wanted_setpoint_pps": want[1]}
        self.store.save_plan(name, plan.activation, plan.demand_pps, per_vr,
                             [(e.kind, e.vr, e.detail) for e in plan.events])
        for cmd in plan.commands:
            detail: dict[str, Any] = {"cmd": cmd.cmd}
            if cmd.setpoint_pps is not None:
                detail["setpoint_pps"] = cmd.setpoint_pps
            try:
                link.call(cmd.cmd, **cmd.fields())
            except DaemonRefused as e:
                self.store.audit("command_refused", "policer", name, cmd.vr, {**detail, "code": e.code, "error": e.message})
                continue
            except BadReply as e:
                self._bad_reply(name, str(e))
                return
            except LinkDown as e:
                self._unreachable(name, str(e))
                return
            self.store.audit(cmd.cmd, "policer", name, cmd.vr, detail)
