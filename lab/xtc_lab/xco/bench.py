"""Benchmark of the XCo fast scheduler on the paper's Figure 27 topology, every host backlogged.

``python -m xtc_lab.xco.bench [--hosts 800 2400 4800 48000] [--events N] [--json OUT]``

Measured, per size:

- ``full_schedule_ms``: from nothing, every host reports its backlog at one instant (one scheduling
  event, the reports as arrays: ``backlog_arrays``), until the first schedule is out;
  ``full_schedule_cpu_ms`` the same in thread CPU time; ``full_schedule_dict_ms`` /
  ``full_schedule_dict_cpu_ms``: the same reports as a ``{host: [dests]}`` mapping (``backlog_many``).
- ``boundary_ms``: one slot boundary at steady state (every slice ends; the next slot's schedule).
- ``event_p50_us`` / ``event_p99_us``: mid-slot events at steady state, alternately a give-up by a
  transmitting host (its slice is handed on) and the same host's new backlog a little later.
- ``events_per_s_one_core``: 1e6 / mean of those events.

``kernel``: which implementation ran (``"numba"``: the compiled kernels, or ``"python"`` when numba
is missing) and ``warm_up_s``, the time the first scheduler of the process spent compiling the
kernels or loading them from numba's on-disk cache (before any measurement).

And once (``--load-hosts``, default 4,800; ``load`` in the JSON): the issue's throughput goal as a
load test, ``cpu_pct``: the CPU time (this process, ``time.process_time``) spent on one simulated
second with 2 ms slots (500 slot boundaries) and 60,000 mid-slot events, in percent of one core.
The events are batched as the controller batches them (those that arrived while the previous read
was handled, at one instant: ``mean_batch`` events per scheduler call); ``load_unbatched``: each
event alone, as before the controller batched.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from typing import Any

import numpy as np

from xtc.xco.scheduler import FastScheduler
from xtc.xco.scheduler import fast as fast_mod
from xtc.xco.topology import parse_topology

from .topologies import fig27, fig27_pairs

__all__ = ["add_xco", "bench_one", "main"]


def bench_one(n_hosts: int, n_events: int = 4000, slice_us: int = 10_000, seed: int = 1) -> dict[str, Any]:
    rows = max(2, n_hosts // 200)
    t0 = time.perf_counter()
    topo = parse_topology(fig27(rows))
    load_s = time.perf_counter() - t0
    pairs = fig27_pairs(rows)
    # the full schedule from the reports as a {host: [dests]} mapping, then as arrays
    sched = FastScheduler(topo, slice_us)
    groups = {x: [d] for x, d in pairs}
    t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
    sched.backlog_many(0, groups)
    full_dict = ((time.perf_counter_ns() - t0) / 1e6, (time.thread_time_ns() - c0) / 1e6)
    sched = FastScheduler(topo, slice_us)
    xs, ds = (np.array(a, np.int64) for a in zip(*pairs))
    counts = np.ones(len(xs), np.int64)
    t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
    first = sched.backlog_arrays(0, xs, counts, ds)
    full_ms, full_cpu_ms = (time.perf_counter_ns() - t0) / 1e6, (time.thread_time_ns() - c0) / 1e6
    active0 = sum(1 for d in first if d.dest is not None)

    rng = random.Random(seed)
    t_us = 0
    boundaries: list[float] = []
    lat: list[float] = []
    gave_up: list[tuple[int, int]] = []
    perf = time.perf_counter_ns
    while len(lat) < n_events:
        # mid-slot events, 100 us apart
        t_us += 100
        nxt = sched.next_expiry_us()
        if nxt is not None and nxt <= t_us:
            a = perf()
            sched.advance(nxt)
            boundaries.append((perf() - a) / 1e6)
        if gave_up and (len(lat) % 2 == 1):
            x, d = gave_up.pop()
            a = perf()
            sched.backlog(t_us, x, [d])
            lat.append((perf() - a) / 1e3)
        else:
            x = rng.randrange(topo.n_hosts)
            d = sched.dest[x]
            if d is None:
                continue
            a = perf()
            sched.giveup(t_us, x, d)
            lat.append((perf() - a) / 1e3)
            gave_up.append((x, d))
    arr = np.array(lat)
    return {
        "hosts": topo.n_hosts,
        "mode": "timeslice",
        "event_p50_us": round(float(np.percentile(arr, 50)), 2),
        "event_p99_us": round(float(np.percentile(arr, 99)), 2),
        "events_per_s_one_core": int(1e6 / arr.mean()),
        "full_schedule_ms": round(full_ms, 3),
        "full_schedule_cpu_ms": round(full_cpu_ms, 3),
        "full_schedule_dict_ms": round(full_dict[0], 3),
        "full_schedule_dict_cpu_ms": round(full_dict[1], 3),
        "boundary_ms": round(float(np.median(boundaries)), 3) if boundaries else None,
        "transmitting_per_slot": active0,
        "events": len(lat),
        "topology_load_s": round(load_s, 2),
    }


def load_test(n_hosts: int, events_per_s: int = 60_000, slice_us: int = 2_000, sim_s: float = 1.0,
              seed: int = 1, batched: bool = True) -> dict[str, Any]:
    """CPU spent scheduling ``sim_s`` of simulated time at ``events_per_s`` mid-slot events.

    Parameters
    ----------
    n_hosts : int
        Figure 27 size (every host backlogged).
    events_per_s : int
        Mid-slot events (give-ups of a transmitting host, and its backlog again) per simulated second.
    slice_us : int
        Slot length, microseconds (every slot boundary is handled too).
    sim_s : float
        Simulated time, seconds.
    batched : bool
        As the controller does (:meth:`ControllerCore.handle_many`): the events that arrived while
        the previous read was being handled (its thread CPU time, slot boundaries included: a
        controller with a core to itself) are handled together at one instant (``events_at``), or
        the first one as soon as it arrives when nothing waits.  False: each event alone at its
        arrival time.

    Returns
    -------
    dict
        ``cpu_pct`` (CPU time / simulated time, percent of one core), ``boundaries``, ``events``,
        ``batches`` (scheduler calls for the events), ``mean_batch`` (events per call) and, batched,
        ``behind_ms``: how late the last read was done after the simulated second (0: kept up).
    """
    rows = max(2, n_hosts // 200)
    topo = parse_topology(fig27(rows))
    sched = FastScheduler(topo, slice_us)
    xs, ds = (np.array(a, np.int64) for a in zip(*fig27_pairs(rows)))
    sched.backlog_arrays(0, xs, np.ones(len(xs), np.int64), ds)
    rng = random.Random(seed)
    n_ev = int(events_per_s * sim_s)
    # the senders' picks, drawn before the clock starts (the network's part, not the controller's):
    # event i takes senders[int(pick[i] * len(senders))]
    pick = [rng.random() for _ in range(n_ev)]
    end_us = int(sim_s * 1e6)
    at_us = [i * end_us // n_ev for i in range(n_ev)] + [1 << 62]  # event i's arrival, us (then none)
    gave_up: list[tuple[int, int]] = []
    events = boundaries = batches = 0
    dest = sched.dest  # (updated in place by the scheduler)
    events_at, advance, next_expiry_us = sched.events_at, sched.advance, sched.next_expiry_us
    busy = time.thread_time  # the controller's own CPU time: as if it had a core to itself
    c0 = time.process_time()
    senders = [x for x, d in enumerate(dest) if d is not None]
    n_send = len(senders)
    i = 0
    free_us = 0.0  # (batched) when the controller is done with the previous read, simulated us
    w0 = busy()  # (one clock read per read of the controller: its end is the next one's start)
    while i < n_ev:
        t_us = at_us[i]
        if batched and free_us > t_us:
            t_us = int(free_us)
        nxt = next_expiry_us()
        # (several when the controller fell behind; none past the simulated window: a last read
        # that ends after it, on a slow machine, would otherwise also handle the boundary at its end)
        while nxt is not None and nxt <= t_us and nxt < end_us:
            granted = [dv.host for dv in advance(nxt) if dv.dest is not None]
            if granted:
                senders = granted
                n_send = len(senders)
            boundaries += 1
            nxt = next_expiry_us()
        batch: list[tuple[str, int, Any]] = []
        taken: set[int] = set()
        while at_us[i] <= t_us:  # (the sentinel at_us[n_ev] never is)
            if gave_up and i % 2:
                x, d = gave_up.pop()
                batch.append(("backlog", x, [d]))
            else:
                x = senders[int(pick[i] * n_send)]
                d = dest[x]
                if d is not None and x not in taken:  # (else it gave up earlier in this slot)
                    taken.add(x)
                    batch.append(("giveup", x, d))
                    gave_up.append((x, d))
            i += 1
            if not batched:
                break
        if batched:
            if batch:
                events_at(t_us, batch)
                batches += 1
        else:
            for kind, x, arg in batch:
                (sched.backlog if kind == "backlog" else sched.giveup)(t_us, x, arg)
                batches += 1
        events += len(batch)
        w1 = busy()
        free_us = t_us + (w1 - w0) * 1e6
        w0 = w1
    sched.advance(max(end_us, sched.now_us))
    cpu_s = time.process_time() - c0
    return {"hosts": topo.n_hosts, "slice_us": slice_us, "events_per_s": events_per_s, "events": events,
            "boundaries": boundaries, "sim_s": sim_s, "batched": batched, "batches": batches,
            "mean_batch": round(events / max(1, batches), 2), "cpu_pct": round(100 * cpu_s / sim_s, 1),
            "behind_ms": round(max(0.0, free_us - end_us) / 1e3, 1) if batched else None}


def sim_test(n_hosts: int, sim_s: float = 1.0, mode: str = "timeslice", fast_forward: bool = True,
             cores: bool = True) -> dict[str, Any]:
    """Wall time of the Figure 27 simulator (:func:`xtc_lab.xco.simulate.simulate`, its defaults:
    10 ms slices, 10 us steps) at ``n_hosts`` for ``sim_s`` simulated seconds, with the loss it found
    (and from 50 ms on, once the agents have started; None for a shorter run).
    ``fast_forward``: repeated slots whose queues came back to the same state are skipped (the
    simulator's default); False steps through every 10 us.  ``cores``: the product's agent and
    controller cores run the control (:mod:`xtc_lab.xco.oneloop`; ``cores_wall_s`` of the wall
    time is theirs); False: the scheduler alone."""
    from .simulate_figures import run_fig27  # (imported here: only this entry needs it)
    row = run_fig27([max(2, n_hosts // 200)], modes=(mode,), duration_s=sim_s, fast_forward=fast_forward,
                    cores=cores)["rows"][0]
    return {"hosts": row["hosts"], "mode": mode, "sim_s": sim_s, "fast_forward": fast_forward, "cores": cores,
            "wall_s": row["wall_s"][mode], "cores_wall_s": row.get("xco", {}).get(mode, {}).get("wall_s"),
            "loss_pct": row["loss_pct"][mode], "loss_after_start_pct": row["loss_after_start_pct"][mode]}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hosts", type=int, nargs="+", default=[800, 2400, 4800, 48000])
    p.add_argument("--events", type=int, default=4000, help="mid-slot events measured per size")
    p.add_argument("--load-hosts", type=int, default=4800,
                   help="size of the 60,000 events/s, 2 ms slot load test (0: skip)")
    p.add_argument("--sim-hosts", type=int, default=800,
                   help="size of the timed 1 s Figure 27 simulation (0: skip; 4800 is Figure 27's largest: "
                        "about 4-7 minutes with the cores on a 2-core host)")
    p.add_argument("--sim-control", choices=("cores", "scheduler"), default="cores",
                   help="the simulation's control: the agent and controller cores (default) or the scheduler alone")
    p.add_argument("--sim-step-by-step", action="store_true",
                   help="simulate every 10 us step (no fast-forward of repeated slots; 20-40 s at 4800 hosts)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--out", default=None, help="also write the JSON to this file")


def kernel_info() -> dict[str, Any]:
    """Which scheduler implementation runs, and its compile (or cache load) time, seconds."""
    FastScheduler(parse_topology(fig27(2)), 10_000)  # the first construction compiles the kernels
    warm = getattr(FastScheduler, "warm_up_s", None)
    return {"impl": fast_mod.IMPL, "warm_up_s": None if warm is None else round(warm, 3)}


def run(args: argparse.Namespace) -> int:
    res: dict[str, Any] = {"kernel": kernel_info()}
    res["scheduler"] = [bench_one(n, args.events) for n in args.hosts]
    if args.load_hosts:
        res["load"] = load_test(args.load_hosts)
        res["load_unbatched"] = load_test(args.load_hosts, batched=False)
    if args.sim_hosts:
        res["simulate"] = sim_test(args.sim_hosts, fast_forward=not args.sim_step_by_step,
                                   cores=args.sim_control == "cores")
    text = json.dumps(res, indent=2)
    if args.json:
        print(text)
    else:
        k = res["kernel"]
        print(f"scheduler: {k['impl']} (compile or cache load at the first construction: {k['warm_up_s']} s)")
        print(f"{'hosts':>7} {'mode':>10} {'p50 us':>8} {'p99 us':>8} {'events/s':>10} {'full ms':>9} {'bound. ms':>9}")
        for r in res["scheduler"]:
            print(f"{r['hosts']:>7} {r['mode']:>10} {r['event_p50_us']:>8.1f} {r['event_p99_us']:>8.1f} "
                  f"{r['events_per_s_one_core']:>10.0f} {r['full_schedule_ms']:>9.1f} {r['boundary_ms'] or 0:>9.2f}")
        if "load" in res:
            for name in ("load", "load_unbatched"):
                ld = res[name]
                print(f"{name}: {ld['hosts']} hosts, {ld['events']} mid-slot events ({ld['mean_batch']} per call) "
                      f"and {ld['boundaries']} slot boundaries ({ld['slice_us']} us slots) in {ld['sim_s']} s "
                      f"simulated: {ld['cpu_pct']} % of one core")
        if "simulate" in res:
            sm = res["simulate"]
            how = "fast-forward" if sm["fast_forward"] else "step by step"
            print(f"simulate: Figure 27, {sm['hosts']} hosts, {sm['mode']}, {sm['sim_s']} s simulated ({how}, "
                  f"{'agent and controller cores' if sm['cores'] else 'the scheduler alone'}) in "
                  f"{sm['wall_s']} s of wall time (cores: {sm['cores_wall_s']} s; loss {sm['loss_pct']} %, "
                  f"after the start {sm['loss_after_start_pct']} %)")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0


def add_xco(sub: Any) -> None:
    """Register ``xtc bench xco``."""
    p = sub.add_parser("xco", help="the XCo scheduler on the Figure 27 topology (800 to 48,000 hosts)")
    add_arguments(p)
    p.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m xtc_lab.xco.bench", description=__doc__.splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
