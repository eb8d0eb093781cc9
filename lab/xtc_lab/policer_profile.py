"""Where the policer engine's CPU per measurement goes: ``python -m xtc_lab.policer_profile``.

Runs the real engine (:class:`xtc.policer.engine.Engine`, its :class:`~xtc.policer.link.LinkPool` and
:class:`~xtc.policer.samples.SampleStreams`, a SQLite or PostgreSQL store) in this process against a
fleet of stand-in daemons (``python -m xtc_lab.policer_fleet`` in a child process, over real sockets),
as ``xtc policer serve``'s engine process runs it, but without the API.  After a warm-up it measures
the process's CPU per router measurement (``sampled`` + ``listed``) over ``--window`` periods (seconds at
the profile's period of 1 s) of whole cycles, from a cycle's start to another's (``window``: the cycles, the
measurements and the seconds it covers), unprofiled, then as long again with :mod:`cProfile` on in every engine thread (the cycle's, the worker's, the sample
streams', and the link pool's I/O thread: every callback and task step of its loop), the calls of each thread's loop profiled one by one on the thread's CPU clock (waits for a
lock, the database or the interpreter lock do not count), and prints JSON: the CPU per measurement,
and the profile's top functions by own time and by cumulative time (profiling inflates the times,
roughly evenly; the shares are what it tells), and the unprofiled window's CPU per measurement of each
thread (``thread_cpu_ms_per_measurement``: with ``--sample-link`` the link pool's I/O thread receives and
decodes the samples, else the sample streams' thread; the worker records, screens, plans and writes; the
cycle's thread starts the measurements; libzmq's own threads), and the load average before and after.  With ``--tracemalloc`` it also says how much of the
resident memory Python's own objects hold (traced from the start, which slows everything) and where they
were allocated: the rest is native (libzmq's sockets and queues, SQLite's cache, the libraries).  With
``--census`` it counts the objects the garbage collector tracks, by type (their count and ``sys.getsizeof``
bytes: the containers themselves, not what they hold), after the windows; ``--no-profile`` skips the
profiled window (an RSS run at a fleet the machine barely carries); ``--sizes`` gives the bytes reachable from each
of the engine's, its store's, sample streams' and link pool's attributes (:func:`deep_sizes`).  ``--time
module:function`` (given again, several) also gives the thread CPU inside that function of the product over the
unprofiled window's cycles (``timed``: its calls, us a call and us a measurement; :mod:`xtc_lab.thread_timers`).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import cProfile
import ctypes
import ctypes.util
import gc
import io
import json
import os
import pstats
import resource
import sys
import tempfile
import threading
import time
import tracemalloc
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xtc.policer.engine import Engine
from xtc.policer.link import LinkPool
from xtc.policer.samples import SampleStreams
from xtc.policer.store import Store

try:
    from xtc.service.collector import raise_young_threshold
except ImportError:  # an older product (a results session's before side) sets no threshold
    raise_young_threshold = None  # type: ignore[assignment]

from .policer_fleet import add_fleet_arguments, add_policer_arguments, add_window_arguments, fleet_process
from .thread_timers import FunctionTimers

__all__ = ["Mark", "loadavg", "main", "proc_cpu_s", "process_cpu_s", "profile_engine", "take_window", "threads_cpu_s",
           "window_figures"]

_ON = threading.Event()
_PROFILES: list[cProfile.Profile] = []
_LOCAL = threading.local()


def _profiled(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with a per-thread :class:`cProfile.Profile` on around each call while :data:`_ON` is set."""

    def wrapper(*a: Any, **kw: Any) -> Any:
        if not _ON.is_set() or getattr(_LOCAL, "inside", False):
            return fn(*a, **kw)
        prof = getattr(_LOCAL, "prof", None)
        if prof is None:
            prof = _LOCAL.prof = cProfile.Profile(time.thread_time)  # the thread's CPU, not its waits
            _PROFILES.append(prof)
        _LOCAL.inside = True
        prof.enable()
        try:
            return fn(*a, **kw)
        finally:
            prof.disable()
            _LOCAL.inside = False

    return wrapper


def _patch() -> None:
    """Profile the per-iteration work of each engine thread (the loops themselves only wait)."""
    for cls, names in ((Engine, ("run_cycle", "contact_new", "probe_silent", "_handle_batch", "_snapshot")),
                       (SampleStreams, ("_drain", "_reconcile")),
                       # the link pool's I/O thread: every callback and task step its loop runs (a turn of datagrams,
                       # a connection read, an exchange's and a subscription's steps, the timers), the only asyncio
                       # loop in the engine's process
                       (asyncio.Handle, ("_run",))):
        for n in names:
            setattr(cls, n, _profiled(getattr(cls, n)))
    Engine.run_cycle = _STARTS.wrap(Engine.run_cycle)  # type: ignore[method-assign]


class _CycleStarts:
    """Marks taken on the engine's cycle thread at a cycle's start, before it counts any measurement."""

    def __init__(self) -> None:
        self._want: threading.Event | None = None
        self._mark: Mark | None = None
        self.mark: Callable[[], Mark] | None = None  # set once the engine exists

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*a: Any, **kw: Any) -> Any:
            want = self._want
            if want is not None and self.mark is not None:
                self._want = None
                self._mark = self.mark()
                want.set()
            return fn(*a, **kw)

        return wrapper

    def next_mark(self, timeout_s: float = 30.0) -> Mark:
        """The mark at the next cycle's start (waits for it)."""
        want = self._want = threading.Event()
        if not want.wait(timeout_s):
            raise RuntimeError(f"no engine cycle started in {timeout_s} s")
        assert self._mark is not None
        return self._mark


_STARTS = _CycleStarts()


def _top(stats: pstats.Stats, key: str, n: int) -> list[str]:
    buf = io.StringIO()
    stats.stream = buf  # type: ignore[attr-defined]
    stats.sort_stats(key).print_stats(n)
    lines = buf.getvalue().splitlines()
    start = next((i for i, s in enumerate(lines) if s.lstrip().startswith("ncalls")), 0)
    return [s.rstrip() for s in lines[start:] if s.strip()]


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def threads_cpu_s() -> dict[str, float]:
    """CPU seconds (user + system) of each thread of this process by its name (``/proc/self/task``: a Python
    thread by its :mod:`threading` name, another (libzmq's) by the kernel's), threads of one name summed."""
    tick = os.sysconf("SC_CLK_TCK")
    named = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue  # ended meanwhile
        name = named.get(int(task.name)) or stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def census(objects: list[Any] | None = None, top: int = 30) -> list[dict[str, Any]]:
    """The objects the garbage collector tracks, by type: ``top`` types by ``sys.getsizeof`` bytes, each with
    its count and bytes (a container's own size, not what it holds; untracked objects, such as floats and
    strings, are counted only inside the ``sys.getsizeof`` of the containers that hold them: not at all)."""
    count: collections.Counter[str] = collections.Counter()
    size: collections.Counter[str] = collections.Counter()
    for o in gc.get_objects() if objects is None else objects:
        t = type(o)
        name = f"{t.__module__}.{t.__qualname__}"
        count[name] += 1
        try:
            size[name] += sys.getsizeof(o)
        except TypeError:
            pass
    return [{"type": k, "count": count[k], "bytes": b} for k, b in size.most_common(top)]


_OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.CodeType, types.FrameType,
           types.MethodType, threading.Thread, type(threading.Lock()), type(threading.RLock()), threading.Condition,
           threading.Event)


def deep_sizes(roots: dict[str, Any]) -> dict[str, int]:
    """The bytes (``sys.getsizeof``, each object once) reachable from each named object, in the order given: an
    object reachable from two is counted in the first.  Objects named elsewhere in ``roots`` (and the objects
    whose attributes are named), types, modules, functions, methods, frames, threads and locks are not followed
    (a bound method would lead back to its object, a thread to every module).  A numpy array that owns its data
    counts it; a ZeroMQ socket counts only its Python object (what libzmq holds is native)."""
    stop = {id(o) for o in roots.values()}
    seen: set[int] = set()
    out: dict[str, int] = {}
    for name, root in roots.items():
        total, todo = 0, [root]
        while todo:
            o = todo.pop()
            i = id(o)
            if i in seen or (i in stop and o is not root) or isinstance(o, _OPAQUE):
                continue
            seen.add(i)
            try:
                total += sys.getsizeof(o)
            except TypeError:
                pass
            todo.extend(gc.get_referents(o))
        out[name] = total
    return out


def _engine_structures(eng: Engine) -> dict[str, Any]:
    """The engine's, its store's, sample streams' and link pool's attributes by name, the per-router ones first."""
    first = ["store._live", "store._states", "store._recorded", "store._recorded_heads", "engine._state",
             "samples._latest", "samples._last_body", "samples._linked", "links._conns", "links._subs"]
    objs = {"engine": eng, "store": eng.store, "samples": eng.samples, "links": eng.links}
    attrs: dict[str, Any] = {}
    for owner, o in objs.items():
        names = list(getattr(o, "__dict__", {})) + [n for c in type(o).__mro__ for n in getattr(c, "__slots__", ())]
        for n in names:
            if hasattr(o, n) and not isinstance(getattr(o, n), (int, float, str, bool, type(None))):
                attrs[f"{owner}.{n}"] = getattr(o, n)
    ordered = {k: attrs[k] for k in first if k in attrs}
    ordered.update((k, v) for k, v in attrs.items() if k not in ordered)
    return {**{f"({k})": v for k, v in objs.items()}, **ordered}


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                                               "uordblks", "fordblks", "keepcost")]


def heap() -> dict[str, int]:
    """Where this process's heap is, in bytes: Python's small-object allocator (``pymalloc_arenas``: its arenas,
    ``pymalloc_in_use``: the blocks in use in them, from :func:`sys._debugmallocstats`) and the C library's
    ``malloc`` (``malloc_in_use``, ``malloc_free``: free but held, ``malloc_mmapped``: large blocks mapped on
    their own; glibc's ``mallinfo2``, all arenas).  Python's objects larger than 512 bytes, numpy's data,
    libzmq's and SQLite's memory are all in ``malloc``."""
    out: dict[str, int] = {}
    with tempfile.TemporaryFile() as f:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(f.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        text = f.read().decode(errors="replace")
    for line in text.splitlines():
        left, _, right = line.partition("=")
        value = right.strip().replace(",", "")
        if not value.isdigit():
            continue
        if "bytes/arena" in left:
            out["pymalloc_arenas"] = int(value)
        elif left.startswith("# bytes in allocated blocks"):
            out["pymalloc_in_use"] = int(value)
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
        mi = libc.mallinfo2()
        out.update(malloc_in_use=mi.uordblks, malloc_free=mi.fordblks, malloc_mmapped=mi.hblkhd)
    except (OSError, AttributeError):  # not glibc, or older than 2.33
        pass
    return out


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of another process of this machine, by ``/proc``."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


@dataclass(frozen=True)
class Mark:
    """The counters at one instant: the engine's cycles and measurements (``sampled`` + ``listed``), the
    process's CPU seconds, each thread's CPU seconds by name, the monotonic time."""

    cycles: int
    measurements: int
    cpu_s: float
    threads_cpu_s: dict[str, float]
    t: float


def take_window(mark: Callable[[], Mark], next_cycle_mark: Callable[[], Mark], sleep: Callable[[float], None],
                window_s: float, period_s: float) -> tuple[Mark, Mark]:
    """The marks at a window's start and end: both at a cycle's start (``next_cycle_mark``: the mark at the
    next cycle's start, before it counts any measurement), ``round(window_s / period_s)`` cycles (at least
    one) apart.  So the window holds exactly the measurements its cycles counted and about that many
    periods' CPU.  (Marks ``window_s`` apart at any instant (``mark``, ``sleep``) held 9 to 11 cycles'
    measurements in 10 s, as a cycle counts its measurements all at once, some time after its start.)"""
    cycles = max(1, round(window_s / period_s))
    m0 = m1 = next_cycle_mark()
    while m1.cycles < m0.cycles + cycles:
        m1 = next_cycle_mark()
    return m0, m1


def window_figures(m0: Mark, m1: Mark) -> dict[str, Any]:
    """A window's figures from its two marks: ms of CPU per measurement (the process's and each thread's),
    measurements a second, the measurements and the cycles it covers."""
    n, c, w = m1.measurements - m0.measurements, m1.cpu_s - m0.cpu_s, m1.t - m0.t
    return {"cycles": m1.cycles - m0.cycles, "measurements": n, "seconds": round(w, 3),
            "measured_per_s": round(n / w) if w > 0 else None,
            "cpu_ms_per_measurement": round(1000 * c / n, 4) if n else None,
            "thread_cpu_ms_per_measurement": {
                k: round(1000 * (v - m0.threads_cpu_s.get(k, 0.0)) / n, 4) for k, v in sorted(m1.threads_cpu_s.items())
                if v - m0.threads_cpu_s.get(k, 0.0) > 0} if n else {}}


def _timers_on(timers: FunctionTimers, next_cycle_mark: Callable[[], Mark]) -> Callable[[], Mark]:
    """``next_cycle_mark`` that switches ``timers`` on once it has the mark: from the window's first cycle start
    (the profile's thread switches them off at its last, a few microseconds late)."""

    def marked() -> Mark:
        m = next_cycle_mark()
        timers.start()
        return m

    return marked


def profile_engine(routers: int = 1000, vrs: int = 16, dead: float = 0.1, window_s: float = 10.0,
                   warmup_s: float | None = None, db_url: str | None = None, top: int = 30,
                   snapshot_interval_s: float = 10.0, trace_memory: bool = False, jitter: float = 0.0,
                   sample_link: bool = False, schema: str | None = None, census_types: bool = False,
                   profiled_window: bool = True, structures: bool = False, trim: bool = False,
                   link_only: bool = False, pace_s: float | None = None, sample_udp: str | None = None,
                   gc_policy: bool = True, stats_path: str | None = None, timed: tuple[str, ...] = (),
                   link_transport: str | None = None) -> dict[str, Any]:
    """See the module's text; returns the JSON it prints.  ``stats_path``: also write the profiled window's
    whole profile there (:mod:`pstats`' format: callers and callees, which the top lists do not show).
    ``timed``: the functions (``module:attribute``) whose thread CPU the unprofiled window also gives; a name
    that does not resolve raises ValueError before anything starts.  ``link_transport``: the link pool's
    ``transport`` (``engine.link_transport``; None: the pool's default)."""
    timers = FunctionTimers(timed)  # (restored at the end of the with block below)
    _patch()
    gc_set = gc_policy and raise_young_threshold is not None
    if gc_set:  # the engine process's garbage-collector setting, as xtc.policer.engine_proc makes it
        raise_young_threshold()
    if trace_memory:
        tracemalloc.start(1)
    out: dict[str, Any] = {"routers": routers, "vrs_per_router": vrs, "dead_fraction": dead, "window_s": window_s,
                           "jitter": jitter, "sample_link": sample_link, "schema": schema, "pace_s": pace_s,
                           "sample_udp": sample_udp, "link_transport": link_transport, "gc_policy": gc_set,
                           "loadavg_before": loadavg()}
    with timers, tempfile.TemporaryDirectory(prefix="xtc-prof-") as tmp, \
            fleet_process(routers, vrs, dead, jitter, pub_socket=not link_only) as (fleet, fleet_routers):
        eng = store = None
        try:
            store = Store(db_url or f"sqlite:///{tmp}/policer.db")
            for r in fleet_routers:
                store.add_router(r["name"], r["endpoint"], r["capacity_pps"], "on", None, "profile",
                                 pub_endpoint=r["pub_endpoint"])
            pool = LinkPool(0.9, **({"sample_schema": schema} if schema else {}),  # (an older xtc has no schema)
                            **({"pace_s": pace_s} if pace_s is not None else {}),
                            **({"sample_udp": sample_udp} if sample_udp else {}),  # (an older xtc has none)
                            **({"transport": link_transport} if link_transport else {}))
            eng = Engine(store, pool, period_s=1.0, samples=SampleStreams(vrs, links=pool if sample_link else None),
                         snapshot_interval_s=snapshot_interval_s)
            eng.start()
            time.sleep(warmup_s if warmup_s is not None else 10 + routers / 100)
            out["measured_per_s"] = {}

            def mark() -> Mark:
                return Mark(eng.cycles, eng.sampled + eng.listed, process_cpu_s(), threads_cpu_s(), time.monotonic())

            _STARTS.mark = mark
            out["window"] = {}
            for profiled in (False, True) if profiled_window else (False,):
                if profiled:
                    _ON.set()
                p0 = (eng.planned, getattr(eng, "plans_quiet", 0), eng.plans_skipped)
                c0 = (eng.sampled, eng.listed, eng.probed, getattr(eng, "shed", 0))
                f0 = proc_cpu_s(fleet.pid)
                m0, m1 = take_window(mark, _STARTS.next_mark if profiled else _timers_on(timers, _STARTS.next_mark),
                                     time.sleep, window_s, eng.period_s)
                timers.stop()
                if not profiled:  # the stand-in fleet's own CPU (it shares the machine)
                    out["fleet_cpu_s_per_s"] = round((proc_cpu_s(fleet.pid) - f0) / (m1.t - m0.t), 3)
                fig = window_figures(m0, m1)
                out["window"]["profiled" if profiled else "plain"] = {k: fig[k] for k in ("cycles", "measurements", "seconds")}
                n = fig["measurements"]
                if not profiled and n:  # where the unprofiled CPU goes, per thread (ms per measurement)
                    out["thread_cpu_ms_per_measurement"] = fig["thread_cpu_ms_per_measurement"]
                if not profiled and (inside := timers.figures(n)):  # and inside the functions named (--time)
                    out["timed"] = inside
                _ON.clear()
                key = "profiled" if profiled else "plain"
                out["measured_per_s"][key] = fig["measured_per_s"]
                out.setdefault("cpu_ms_per_measurement", {})[key] = fig["cpu_ms_per_measurement"]
                # routers planned (of them found quiet by the arrays, planned to nothing without plan_router),
                # and not planned at all (the same inputs as a plan that changed nothing)
                out.setdefault("plans", {})[key] = {"planned": eng.planned - p0[0],
                                                    "quiet": getattr(eng, "plans_quiet", 0) - p0[1],
                                                    "skipped": eng.plans_skipped - p0[2]}
                # the measurements by where they came from: a sample, or a `list` (of them the probes of streams
                # that fell silent); and those put off while the engine was behind
                out.setdefault("measured_by", {})[key] = {"sampled": eng.sampled - c0[0], "listed": eng.listed - c0[1],
                                                          "probed": eng.probed - c0[2],
                                                          "shed": getattr(eng, "shed", 0) - c0[3]}
            if eng.error is not None:
                raise RuntimeError("engine failed") from eng.error
            out["cycle_ms"] = {"p50": None, "p99": None}
            cs = sorted(eng.cycle_s)
            if cs:
                out["cycle_ms"] = {"p50": round(1000 * cs[len(cs) // 2]), "p99": round(1000 * cs[min(len(cs) - 1, int(0.99 * len(cs)))])}
            out["loadavg_after"] = loadavg()
            out["links"] = pool.stats()  # (how the samples came: samples_received, udp_received, udp_dropped)
            out["maxrss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
            out["rss_mb"] = round(_rss_bytes() / 1e6, 1)
            out["heap_bytes"] = heap()
            if trim:  # what the C library would give back: its free pages (glibc's malloc_trim), and how long it takes
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                t0 = time.perf_counter()
                libc.malloc_trim(0)
                out["trim_ms"] = round(1000 * (time.perf_counter() - t0), 2)
                out["rss_after_trim_mb"] = round(_rss_bytes() / 1e6, 1)
                out["heap_after_trim_bytes"] = heap()
            if trace_memory:
                snap = tracemalloc.take_snapshot()
                out["python_traced_mb"] = round(tracemalloc.get_traced_memory()[0] / 1e6)
                out["python_top_allocations"] = [f"{st.size / 1e6:.1f} MB {st.count} blocks {st.traceback[0].filename.rsplit('/', 2)[-1]}:{st.traceback[0].lineno}"
                                                 for st in snap.statistics("lineno")[:top]]
                out["python_allocations"] = [{"site": f"{st.traceback[0].filename.rsplit('/', 2)[-1]}:{st.traceback[0].lineno}",
                                              "bytes": st.size, "blocks": st.count}
                                             for st in snap.statistics("lineno") if st.size >= 100_000]
                tracemalloc.stop()
            if census_types:
                out["python_types"] = census(top=top)
            if structures:
                roots = _engine_structures(eng)
                got = deep_sizes(roots)
                out["structure_bytes"] = {k: v for k, v in sorted(got.items(), key=lambda kv: -kv[1])
                                          if v >= 10_000 and not k.startswith("(")}
            if _PROFILES:
                stats = pstats.Stats(_PROFILES[0])
                for p in _PROFILES[1:]:
                    stats.add(p)
                stats.strip_dirs()
                out["top_tottime"] = _top(stats, "tottime", top)
                out["top_cumulative"] = _top(stats, "cumulative", top)
                if stats_path:
                    stats.dump_stats(stats_path)
        finally:
            if eng is not None:
                eng.stop()
            if store is not None:
                store.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m xtc_lab.policer_profile", description=__doc__.split("\n\n")[0])
    add_fleet_arguments(p)
    add_window_arguments(p, "seconds measured (whole cycles of 1 s), unprofiled then profiled")
    p.add_argument("--db", default=None, help="database URL (default: a temporary SQLite file)")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--tracemalloc", action="store_true", help="also trace Python's allocations (slower)")
    p.add_argument("--sample-link", action="store_true",
                   help="the samples over the link's connection (as the service takes them), not a SUB socket per router")
    p.add_argument("--schema", default=None,
                   help="the samples' format the engine asks its daemons for (xtc-samples/2 or /3; default: the engine's)")
    p.add_argument("--census", action="store_true", help="also count the objects the garbage collector tracks, by type")
    p.add_argument("--sizes", action="store_true",
                   help="also the bytes reachable from each of the engine's, store's, streams' and pool's attributes")
    p.add_argument("--trim", action="store_true", help="also the RSS after glibc's malloc_trim(0), and its time")
    p.add_argument("--link-only", action="store_true",
                   help="the stand-in fleet without PUB sockets (with --sample-link: 5,000 daemons fit 20,000 descriptors)")
    p.add_argument("--no-profile", action="store_true", help="skip the profiled window (CPU unprofiled, RSS)")
    p.add_argument("--pace-s", type=float, default=None,
                   help="the link pool's pace, seconds: its I/O thread waits on its sockets at most once this often "
                        "(default: the pool's, xtc.policer.link.PACE_S)")
    p.add_argument("--sample-udp", default=None, metavar="ADDRESS[:PORT]",
                   help="with --sample-link: the samples as signed UDP datagrams to this address (engine.sample_udp; "
                        "without a port, any free one)")
    add_policer_arguments(p)
    p.add_argument("--gc-default", action="store_true",
                   help="leave Python's garbage collector as it is (default: the engine process's young threshold, "
                        "xtc.service.collector)")
    p.add_argument("--time", action="append", default=[], metavar="MODULE:FUNCTION",
                   help="also the thread CPU inside this function of the product over the unprofiled window (given "
                        "again: several; e.g. xtc.policer.store:Store.record_outcomes)")
    p.add_argument("--stats", default=None, metavar="PATH",
                   help="also write the profiled window's whole profile to PATH (pstats: its callers and callees)")
    args = p.parse_args(argv)
    try:
        FunctionTimers(args.time).restore()  # every name resolves (else nothing starts)
    except ValueError as e:
        p.error(f"--time {e}")
    print(json.dumps(profile_engine(args.routers, args.vrs, args.dead, args.window, args.warmup, args.db, args.top,
                                    trace_memory=args.tracemalloc, jitter=args.jitter,
                                    sample_link=args.sample_link, schema=args.schema, census_types=args.census,
                                    profiled_window=not args.no_profile, structures=args.sizes,
                                    trim=args.trim, link_only=args.link_only, pace_s=args.pace_s,
                                    sample_udp=(args.sample_udp if not args.sample_udp or ":" in args.sample_udp
                                                else args.sample_udp + ":0"),
                                    gc_policy=not args.gc_default, stats_path=args.stats, timed=tuple(args.time),
                                    link_transport=args.link_transport),
                     indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
