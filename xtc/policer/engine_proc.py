"""The policy engine in a process of its own, beside the API's (``xtc policer serve``).

Polling thousands of routers and planning them is CPU work; in the API's process it would share one
interpreter lock with the request handlers, and every request would wait behind it.  So ``serve``
starts the engine as a child (``python -m xtc.policer.engine_proc``) with a store of its own on the
same database (SQLite in WAL mode serialises the two processes' writes; PostgreSQL has its pool per
process).  On PostgreSQL the child also holds the leader lock (:class:`~xtc.policer.service.Leadership`):
the process that runs the engine is the one that holds the lock, and when it dies the lock's session
ends with it.

The parent sends the child its settings as one JSON line on its stdin and keeps that pipe open; the
child stops when it reaches end of file (the parent stopped it, or died: even SIGKILLed, its end of
the pipe is closed by the kernel).  The child reports on its stdout, one JSON line every
:data:`REPORT_S` and at each change of leadership: cycles run, replies dropped, recent cycle times,
whether it leads and under which epoch, its link pool's counters, and its error if it failed.
:class:`EngineProcess` is the parent's view of it, with the attributes the API reads of an in-process
:class:`~xtc.policer.engine.Engine` (``cycles``, ``bad_replies``, ``cycle_s``, ``link_stats``, ``error``,
``is_leader``).  With ``engine.shards`` n > 1 the parent starts n such children, shard ``i`` of ``n``
each (its own routers, :func:`~xtc.policer.engine.shard_of`; on PostgreSQL its own leader lock and
epoch), and :class:`EngineShards` shows them to the API as one.  If the child fails or dies, ``on_crash`` is called and ``serve`` exits with status 1,
as it did when the engine was a thread.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
from typing import Any, Callable

from xtc.service.collector import raise_young_threshold
from xtc.service.logs import setup_logging

from .db import LeaderLock, NotLeader, StoreError
from .store import Store

__all__ = ["EngineProcess", "EngineShards", "Leadership", "LEADER_RETRY_S", "REPORT_S", "main"]

log = logging.getLogger("xtc.policer.engine")

#: Seconds between two reports of the child.
REPORT_S = 0.25
#: Longest wait for the child's first report when starting it, seconds.
START_TIMEOUT_S = 30.0


class EngineProcess:
    """The parent's handle on the engine's process.

    Parameters
    ----------
    settings : dict
        What the child needs: ``db_url``, ``period_s``, ``request_timeout_s``, ``curve_secret_key_file``,
        ``max_reply_bytes``, ``max_vrs_per_router``, ``samples`` (read the daemons' sample streams), ``holder`` (this policer's name in the audit log),
        ``leader_election`` (PostgreSQL: hold the leader lock to run the cycles).
    on_crash : callable, optional
        Called with the exception when the child fails or dies without being stopped.
    """

    def __init__(self, settings: dict[str, Any], on_crash: Callable[[BaseException], None] | None = None):
        self.settings = settings
        self.on_crash = on_crash
        self.cycles = 0
        self.bad_replies: dict[str, int] = {}
        #: Router measurements taken from sample streams and by 'list', sample messages dropped,
        #: routers probed between cycles because their stream fell silent, and measurements put off
        #: while the engine was behind (:attr:`xtc.policer.engine.Engine.shed`).
        self.sampled = self.listed = self.bad_samples = self.probed = self.shed = 0
        self.cycle_s: list[float] = []
        self.cycle_hist: dict[str, Any] = {"counts": [], "sum": 0.0}
        self.gap_s: list[float] = []
        #: The link pool's counters at the child's last report (:meth:`~xtc.policer.link.LinkPool.stats`).
        self.link_stats: dict[str, int] = {}
        self.error: BaseException | None = None
        self.leader_epoch: int | None = None
        self._leads = False
        self._stopping = False
        self._proc: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None
        self._reported = threading.Event()

    def is_leader(self) -> bool:
        """True while the child runs the policy cycles (on PostgreSQL: holds the leader lock)."""
        return self._leads

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self, wait: bool = True) -> None:
        """Start the child; return once it has reported (its engine runs) or ended, at most
        :data:`START_TIMEOUT_S` later (``wait=False``: at once; :meth:`wait_started` waits)."""
        self._proc = subprocess.Popen([sys.executable, "-m", "xtc.policer.engine_proc"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True, bufsize=1)
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(self.settings) + "\n")
        self._proc.stdin.flush()
        self._reader = threading.Thread(target=self._read, name="policer-engine-reports", daemon=True)
        self._reader.start()
        if wait:
            self.wait_started()

    def wait_started(self) -> None:
        # The API serves once the engine runs (its first report): a load that starts at once does not
        # meet the child's start-up in its first second.
        self._reported.wait(START_TIMEOUT_S)

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            try:
                rep = json.loads(line)
            except ValueError:
                continue
            self.cycles = rep["cycles"]
            self.bad_replies = {"all": rep["bad_replies"]}
            self.sampled, self.listed, self.bad_samples = rep["sampled"], rep["listed"], rep["bad_samples"]
            self.probed = rep.get("probed", 0)
            self.shed = rep.get("shed", 0)
            self.cycle_s = rep["cycle_s"]
            self.cycle_hist = rep.get("cycle_hist", self.cycle_hist)
            self.gap_s = rep["gap_s"]
            self.link_stats = rep.get("links", self.link_stats)
            self.leader_epoch = rep["epoch"]
            self._leads = rep["leader"]
            self._reported.set()
            if rep.get("error"):
                self._fail(RuntimeError(f"policy engine failed: {rep['error']}"))
        self._reported.set()
        code = self._proc.wait()
        self._leads = False
        if not self._stopping:
            self._fail(RuntimeError(f"the policy engine's process ended (status {code})"))

    def _fail(self, e: BaseException) -> None:
        if self.error is None:
            self.error = e
            log.critical("%s", e)
            if self.on_crash is not None:
                self.on_crash(e)

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop the child (end of its stdin) and wait for it; kill it after ``timeout_s``."""
        self._stopping = True
        p = self._proc
        if p is None:
            return
        try:
            assert p.stdin is not None
            p.stdin.close()
        except OSError:
            pass
        try:
            p.wait(timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        if self._reader is not None:
            self._reader.join(timeout=5)


def _summed(counter: str) -> property:
    """A counter of :class:`EngineShards`: the shards' processes' own, summed."""
    return property(lambda self: sum(getattr(p, counter) for p in self.procs), doc=f"``{counter}``, summed over the shards")


class EngineShards:
    """``engine.shards`` engine processes, shard ``i`` of ``n`` each (:class:`EngineProcess` with
    ``shard`` in its settings), seen by the API as one engine.

    ``cycles`` is the fewest any shard has run; ``sampled``, ``listed``, ``probed``, ``bad_samples``,
    ``bad_replies`` and each counter of ``link_stats`` are summed; ``cycle_s`` and ``gap_s`` are, cycle by cycle from the newest, the
    longest of the shards this process leads (the policy cycle of those routers ends with its slowest
    shard); ``is_leader()`` is true while this process leads at least one shard, and
    :attr:`shard_states` tells which.  A shard's process that fails or dies fails them all
    (``on_crash``), as the one engine's did.
    """

    def __init__(self, settings: dict[str, Any], shards: int, on_crash: Callable[[BaseException], None] | None = None):
        if shards < 2:
            raise ValueError("EngineShards: at least two shards (one engine is an EngineProcess)")
        self.procs = [EngineProcess({**settings, "shard": [i, shards]}, on_crash) for i in range(shards)]

    def start(self) -> None:
        for p in self.procs:  # the children start side by side
            p.start(wait=False)
        for p in self.procs:
            p.wait_started()

    def stop(self, timeout_s: float = 15.0) -> None:
        threads = [threading.Thread(target=p.stop, args=(timeout_s,), daemon=True) for p in self.procs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout_s + 10)

    def is_leader(self) -> bool:
        return any(p.is_leader() for p in self.procs)

    @property
    def error(self) -> BaseException | None:
        return next((p.error for p in self.procs if p.error is not None), None)

    @property
    def cycles(self) -> int:
        return min(p.cycles for p in self.procs)

    @property
    def bad_replies(self) -> dict[str, int]:
        return {"all": sum(sum(p.bad_replies.values()) for p in self.procs)}

    @property
    def link_stats(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.procs:
            for k, v in p.link_stats.items():
                out[k] = out.get(k, 0) + v
        return out

    sampled = _summed("sampled")
    listed = _summed("listed")
    bad_samples = _summed("bad_samples")
    probed = _summed("probed")
    shed = _summed("shed")

    def _aligned_max(self, attr: str) -> list[float]:
        lists = [getattr(p, attr) for p in self.procs if p.is_leader()] or [getattr(p, attr) for p in self.procs]
        m = min(len(x) for x in lists)
        return [max(x[len(x) - m + k] for x in lists) for k in range(m)]

    @property
    def cycle_s(self) -> list[float]:
        return self._aligned_max("cycle_s")

    @property
    def gap_s(self) -> list[float]:
        return self._aligned_max("gap_s")

    @property
    def cycle_hist(self) -> dict[str, Any]:
        """The shards' cycle histograms added up (one observation per shard's cycle)."""
        hs = [p.cycle_hist for p in self.procs if p.cycle_hist["counts"]]
        if not hs:
            return {"counts": [], "sum": 0.0}
        return {"counts": [sum(c) for c in zip(*(h["counts"] for h in hs))], "sum": sum(h["sum"] for h in hs)}

    @property
    def leader_epoch(self) -> int | None:
        """Shard 0's epoch while this process leads it (each shard has its own: :attr:`shard_states`)."""
        return self.procs[0].leader_epoch if self.procs[0].is_leader() else None

    @property
    def shard_states(self) -> list[dict[str, Any]]:
        """Per shard: ``shard``, ``leader`` (this process runs it), ``epoch``, ``cycles``."""
        return [{"shard": i, "leader": p.is_leader(), "epoch": p.leader_epoch if p.is_leader() else None,
                 "cycles": p.cycles} for i, p in enumerate(self.procs)]


#: Seconds between a standby's attempts at the leader lock (and the leader's checks of it).
LEADER_RETRY_S = 1.0


class Leadership:
    """Who runs the engine among the policers on one PostgreSQL database (a thread around a :class:`LeaderLock`).

    Parameters
    ----------
    store : Store
        The process's store; on taking the lead, :meth:`Store.take_leadership` writes the hand-over
        to the audit log once and fences the engine's writes on the new epoch.
    holder : str
        This process's name in the audit log (``host:pid``).
    on_lost : callable
        Called with :class:`~xtc.policer.db.NotLeader` when a held lock's session is gone.
    retry_s : float
        Seconds between attempts / checks.
    """

    def __init__(self, store: Store, holder: str, on_lost: Any, retry_s: float = LEADER_RETRY_S,
                 shard: tuple[int, int] = (0, 1)):
        self.store, self.holder, self.on_lost, self.retry_s, self.shard = store, holder, on_lost, retry_s, shard
        self.lock = LeaderLock(store.url, shard)
        self._told: str | None = None
        self._held = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="policer-leader", daemon=True)

    def held(self) -> bool:
        """True while this process leads (the engine asks before each cycle)."""
        return self._held

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._held = False
        self.lock.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._held:
                if not self.lock.alive():
                    self._held = False
                    log.critical("leader lock lost: stopping so that no two engines command")
                    self.on_lost(NotLeader("the leader lock's database session ended"))
                    return
            elif self.lock.try_acquire():
                try:
                    epoch = self.store.take_leadership(self.holder, self.shard)
                except StoreError as e:
                    log.error("took the leader lock but cannot record it: %s", e)
                    self.lock.close()
                else:
                    where = f" (shard {self.shard[0]} of {self.shard[1]})" if self.shard[1] > 1 else ""
                    log.info("leading (epoch %d): the engine runs here%s", epoch, where)
                    self._held = True
            elif self.lock.conflict is not None and self.lock.conflict != self._told:
                log.error("not leading: %s", self.lock.conflict)
            self._told = self.lock.conflict
            self._stop.wait(self.retry_s)


def main() -> int:
    """The child: read the settings line, run the engine (and the leadership) until stdin ends."""
    # A terminal's ^C, or a service manager's SIGTERM to the whole group, reaches the parent too, which
    # stops us by closing our stdin (an engine that ended first would look like a crash to it).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    cfg = json.loads(sys.stdin.readline())
    setup_logging(cfg.get("log_format", "json"), cfg.get("log_level", "info"))
    from .engine import Engine
    from .link import LinkPool
    from .liveshare import live_file_name
    from .samples import SampleStreams

    try:
        store = Store(cfg["db_url"])
    except StoreError as e:
        print(f"xtc policer engine: {e}", file=sys.stderr)
        return 2
    out_lock = threading.Lock()
    failed: list[BaseException] = []
    done = threading.Event()

    def on_crash(e: BaseException) -> None:
        failed.append(e)
        done.set()

    i, n = cfg.get("shard", (0, 1))
    shard = (int(i), int(n))
    leadership = Leadership(store, cfg["holder"], on_crash, shard=shard) if cfg["leader_election"] else None
    udp = cfg.get("sample_udp")
    try:
        links = LinkPool(cfg["request_timeout_s"], cfg["curve_secret_key_file"], max_reply_bytes=cfg["max_reply_bytes"],
                         sample_schema=cfg.get("sample_schema", "xtc-samples/3"),
                         sample_udp=udp or None, sample_udp_shard=shard[0],
                         transport=cfg.get("link_transport", "zmtp"))
    except OSError as e:
        print(f"xtc policer engine: engine.sample_udp {udp}: cannot bind shard {shard[0]}'s socket: {e}", file=sys.stderr)
        return 2
    streams = (SampleStreams(cfg["max_vrs_per_router"], cfg["curve_secret_key_file"], cfg["max_reply_bytes"],
                             links=links if cfg.get("sample_link", True) else None) if cfg.get("samples") else None)
    raise_young_threshold()  # the collector's young passes no longer walk each batch while it is in use
    engine = Engine(store, links, period_s=cfg["period_s"], on_crash=on_crash,
                    max_vrs_per_router=cfg["max_vrs_per_router"], samples=streams,
                    is_leader=leadership.held if leadership is not None else None, shard=shard,
                    snapshot_interval_s=cfg.get("snapshot_interval_s", 10.0),
                    live_file=os.path.join(cfg["live_dir"], live_file_name(shard)) if cfg.get("live_dir") else None)

    def report() -> None:
        leads = engine.error is None and (leadership is None or leadership.held())
        rep = {"cycles": engine.cycles, "bad_replies": sum(engine.bad_replies.values()),
               "sampled": engine.sampled, "listed": engine.listed, "probed": engine.probed, "shed": engine.shed,
               "bad_samples": sum(streams.bad.values()) if streams is not None else 0,
               "cycle_s": [round(x, 6) for x in engine.cycle_s], "gap_s": [round(x, 6) for x in engine.gap_s],
               "cycle_hist": engine.cycle_hist, "links": engine.link_stats,
               "leader": leads,
               "epoch": store.fence_epoch if leads else None,
               "error": repr(failed[0]) if failed else None}
        with out_lock:
            try:
                sys.stdout.write(json.dumps(rep) + "\n")
                sys.stdout.flush()
            except (OSError, ValueError):  # the parent is gone
                done.set()

    def watch_parent() -> None:
        while sys.stdin.readline():
            pass
        done.set()

    threading.Thread(target=watch_parent, name="policer-engine-parent", daemon=True).start()
    if leadership is not None:
        leadership.start()
    engine.start()
    report()
    while not done.wait(REPORT_S):
        report()
    report()
    # Leadership first: a standby may take the lock while this engine's threads wind down (its
    # writes are fenced on the epoch, and nothing is sent after a refused save).
    if leadership is not None:
        leadership.stop()
    stopper = threading.Thread(target=engine.stop, daemon=True)
    stopper.start()
    stopper.join(10)
    store.close()
    sys.stdout.flush()
    os._exit(1 if failed else 0)


if __name__ == "__main__":
    sys.exit(main())
