"""The thin layer that applies the policies: poll the daemons, plan, push commands, record.

Every ``period_s`` the engine asks each registered router's daemon for its VRs (``list``), records
what it saw, runs :func:`xtc.policer.planner.plan_router` on the stored state, saves the new state and
the decisions, and sends the commands that bring the daemon to the wanted state.  Routers are handled
in parallel, so one that does not answer (marked ``unreachable``, with the error) delays no other;
when it answers again the same reconciliation catches it up.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from .link import DaemonRefused, LinkDown, LinkPool
from .planner import RouterInput, Settings, VrObs, VrPolicy, plan_router
from .policy import MisbehaviourState
from .store import Store

__all__ = ["Engine"]

log = logging.getLogger("xtc.policer.engine")


def _vr_policy(row: dict[str, Any]) -> VrPolicy:
    return VrPolicy(
        weight=row["sla_weight"] if row["sla_weight"] is not None else 1.0,
        min_pps=row["sla_min_pps"] if row["sla_min_pps"] is not None else 0.0,
        max_pps=row["sla_max_pps"] if row["sla_max_pps"] is not None else math.inf,
        manual_setpoint_pps=row["manual_setpoint_pps"],
        misbehaviour=MisbehaviourState(row["punish_level"], row["punish_bad_since_s"], row["punish_good_since_s"]),
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
        Wall-clock seconds; the policies' timers use it, so they survive a restart.
    on_crash : callable, optional
        Called with the exception when a cycle fails unexpectedly (the service then exits so that
        its supervisor restarts it).
    """

    def __init__(self, store: Store, links: LinkPool, period_s: float = 1.0, clock: Callable[[], float] = time.time,
                 on_crash: Callable[[BaseException], None] | None = None, max_workers: int = 8):
        self.store = store
        self.links = links
        self.period_s = period_s
        self.clock = clock
        self.on_crash = on_crash
        self.cycles = 0
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

    def cycle_router(self, r: dict[str, Any], settings: Settings, now: float) -> None:
        name = r["name"]
        link = self.links.get(name, r["endpoint"], r["curve_server_key"])
        try:
            result = link.call("list")
            vrs = result.get("vrs")
            if not isinstance(vrs, list) or not all(isinstance(v, dict) and isinstance(v.get("vr"), str) for v in vrs):
                raise LinkDown("the daemon's 'list' reply has no valid 'vrs' array")
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
        rin = RouterInput(
            name=name, capacity_pps=r["capacity_pps"], control_mode=r["control_mode"], activation=act,
            vrs={n: _vr_obs(row) for n, row in rows.items()},
            policies={n: _vr_policy(row) for n, row in rows.items()},
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
            except LinkDown as e:
                self._unreachable(name, str(e))
                return
            self.store.audit(cmd.cmd, "policer", name, cmd.vr, detail)
