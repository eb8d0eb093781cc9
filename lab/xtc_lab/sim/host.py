"""The simulated host: the control loop drives :class:`xtc_lab.sim.plant.Plant` instead of a hypervisor.

A :class:`~xtc.host.base.Host` like the real ones, so the daemon's loop runs unchanged on it:

- **Counters**: :meth:`SimHost.read_counters` renders the plant's cumulative counters as
  ``/proc/net/dev`` text and the real parser (:func:`xtc.host.counters.parse_proc_net_dev`) reads it.  VR number ``i``
  (from 1) has Xen-style host interfaces ``vif<i>.0 .. vif<i>.<n-1>``: packets offered to the VR
  are host-side TX of ``vif<i>.0``, packets it forwards are host-side RX of the last one, so the
  sums over a VR's interfaces are what they are on a real host.
- **Actuator**: caps go through :meth:`SimHost.apply_cap` / :meth:`SimHost.restore_cap` with the
  same checks as a real actuator (a finite cap >= 1 percent; never 0); ``cap_step_percent``
  quantises them as a hypervisor would (1 = Xen's whole percents) and the cap in force is returned.
- **CPU time**: :meth:`SimHost.read_cpu_ns` is the plant's cumulative CPU use per VR
  (:meth:`xtc_lab.sim.plant.Plant.cpu_seconds`, integrated over the simulator's own clock), in
  nanoseconds like a hypervisor's accounting: about the cap when the cap binds, less when the VR
  is offered less than its cap can forward.
- **Original records**: :meth:`SimHost.snapshot` is
  ``{"backend": "sim", "target": <vr>, "params": {"cap_percent": <cap or null>}}``; restoring it
  writes that cap back (``null``: unlimited).
- **The hypervisor's memory**: a VR's cap outlives the daemon on a real host.  The simulated
  caps are therefore kept in a small JSON file (``<state_dir>/sim-hypervisor.json``, written
  atomically on every change) that a restarted daemon finds again, and that tests read to check
  what caps the VRs were left with.  ``null`` there means unlimited.

Time: the host has its own clock (``clock``, seconds).  Before every counter read and cap write
it advances the plant in its own sub-steps (``dt_s``, 0.1 s) up to ``clock()``: with
``time.monotonic`` the plant runs in real time beside a daemon; with a :class:`SimClock` an
experiment or a benchmark runs as fast as the CPU allows, advancing the clock itself.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Callable, Iterable, Literal, Mapping

from pydantic import model_validator
from pydantic.dataclasses import dataclass

from xtc_lab.sim.plant import Plant, PlantConfig, PlantError, Traffic, VRConfig

from xtc.daemon.config import TABLE, DaemonConfig, Integer, VrName
from xtc.validation import FieldProblem, Number, within
from xtc.service.state import StateFileError, save_state
from xtc.host.counters import parse_proc_net_dev
from xtc.host.errors import ActuatorError, VRNotRunning
from xtc.host.ifcounters import IfCounters
from xtc.host.limiter import LimiterError, LimiterSetting

__all__ = ["SimHost", "SimClock", "SimLimiter", "SimVr", "SimSection", "render_proc_net_dev", "HYPERVISOR_FILE"]


@dataclass(config=TABLE)
class SimVr:
    """One simulated VR (``[[sim.vr]]`` in the daemon's configuration)."""

    name: VrName
    offered_pps: Annotated[Number, within(0.0, 1e9)] = 100_000.0
    initial_cap_percent: Annotated[Number, within(1.0, 100.0)] = 100.0
    traffic: Literal["udp", "tcp"] = "udp"
    interfaces: Annotated[Integer, within(1, 16)] = 2




@dataclass(config=TABLE)
class SimSection:
    """The ``[sim]`` table of a daemon with ``backend = "sim"``::

        [sim]
        seed = 1
        [[sim.vr]]
        name = "vr1"                     # required
        offered_pps = 100000.0
        initial_cap_percent = 100.0      # the VR's cap before XTC touches it
        traffic = "udp"                  # "udp" (does not back off) or "tcp" (backs off)
        interfaces = 2
    """

    seed: Annotated[Integer, within(0, 2**63 - 1)] = 1
    vr: tuple[SimVr, ...] = ()

    @model_validator(mode="after")
    def _some_vrs_each_once(self) -> "SimSection":
        if not self.vr:
            raise FieldProblem("vr", "backend 'sim' needs at least one [[sim.vr]]")
        names = [v.name for v in self.vr]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise FieldProblem("vr", f"names a VR twice: {dup[0]!r}")
        return self

HYPERVISOR_FILE = "sim-hypervisor.json"
_HEADER = (
    "Inter-|   Receive                                                |  Transmit\n"
    " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n"
)
_FRAME_BYTES = 64


def render_proc_net_dev(counters: Mapping[str, tuple[int, int]]) -> str:
    """``/proc/net/dev`` text for ``{ifname: (rx_packets, tx_packets)}`` (64-byte frames)."""
    lines = [_HEADER, "    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0\n"]
    for name, (rx, tx) in counters.items():
        lines.append(
            f"{name:>6}: {rx * _FRAME_BYTES} {rx} 0 0 0 0 0 0 {tx * _FRAME_BYTES} {tx} 0 0 0 0 0 0\n"
        )
    return "".join(lines)


class SimClock:
    """A clock that moves only when told to (seconds): simulated time for experiments and benchmarks."""

    def __init__(self, t0_s: float = 0.0) -> None:
        self.t_s = float(t0_s)

    def __call__(self) -> float:
        return self.t_s

    def advance(self, dt_s: float) -> float:
        """Move the clock ``dt_s`` seconds forward; returns the new time."""
        if not dt_s >= 0:
            raise ValueError(f"a clock only moves forward, got {dt_s!r} s")
        self.t_s += dt_s
        return self.t_s


class SimHost:
    """The :class:`~xtc.host.base.Host` of the simulated plant.

    Parameters
    ----------
    vrs : tuple of SimVr
        The simulated VRs (traffic, offered rate, interfaces, initial cap).
    seed : int
        Seed of the plant's noise.
    hypervisor_path : path or None
        Where the caps outlive the host object (see the module docstring).
    dt_s : float
        The plant's sub-step, seconds.
    clock : callable, optional
        The host's clock, seconds (default ``time.monotonic``: real time).
    cap_step_percent : float, optional
        Quantum of the caps put in force (1 = Xen's whole percents); None = exact.
    plant_config : PlantConfig, optional
        The plant to simulate, one VR of it per entry of ``vrs`` in the same order (Dom0s, speeds,
        lags, noise, hogs); default: UDP or TCP VRs as ``vrs`` says behind one default Dom0.  Its
        ``seed`` and ``dt_s`` are then used and ``seed`` and ``dt_s`` are ignored.
    """

    name = "sim"
    #: Its ``vif<i>.<n>`` are the plant's, not the host's: the daemon opens no early-drop limiter
    #: (it would put its qdisc on a real interface of that name, e.g. a lab's).
    real_interfaces = False
    counter_bits = 64

    def __init__(self, vrs: tuple[SimVr, ...], seed: int, hypervisor_path: str | Path | None, dt_s: float = 0.1,
                 clock: Callable[[], float] | None = None, cap_step_percent: float | None = None,
                 plant_config: PlantConfig | None = None):
        self.clock: Callable[[], float] = clock or time.monotonic
        if cap_step_percent is not None and not (cap_step_percent > 0):
            raise ValueError(f"cap_step_percent must be > 0, got {cap_step_percent!r}")
        self.cap_step_percent = cap_step_percent
        self.vr_names = [v.name for v in vrs]
        self._index = {n: i for i, n in enumerate(self.vr_names)}
        self._nif = {v.name: v.interfaces for v in vrs}
        self.hypervisor_path = Path(hypervisor_path) if hypervisor_path is not None else None
        caps: dict[str, float | None] = {v.name: v.initial_cap_percent for v in vrs}
        caps.update(self._load_hypervisor(set(caps)))
        self.caps: dict[str, float | None] = caps
        if plant_config is None:
            plant_config = PlantConfig(
                vrs=tuple(
                    VRConfig(
                        traffic=Traffic(v.traffic, v.offered_pps),
                        initial_cap_percent=caps[v.name] if caps[v.name] is not None else 100.0,
                    )
                    for v in vrs
                ),
                seed=seed,
                dt_s=dt_s,
            )
        elif len(plant_config.vrs) != len(vrs):
            raise ValueError(f"plant_config has {len(plant_config.vrs)} VRs, vrs names {len(vrs)}")
        else:
            plant_config = replace(plant_config, vrs=tuple(
                replace(pv, initial_cap_percent=caps[v.name] if caps[v.name] is not None else 100.0)
                for pv, v in zip(plant_config.vrs, vrs)
            ))
        self.plant = Plant(plant_config)
        self._t0: float | None = None
        self.writes = 0
        self._save_hypervisor()

    @classmethod
    def for_plant(cls, config: PlantConfig, names: tuple[str, ...] | None = None, interfaces: int = 2,
                  clock: Callable[[], float] | None = None, cap_step_percent: float | None = None) -> "SimHost":
        """A host over the plant ``config`` (its VRs named ``names``, default ``vr1``, ``vr2``, ...).

        The VRs start at their configured caps; nothing outlives the host (no hypervisor file).
        """
        names = names or tuple(f"vr{i + 1}" for i in range(len(config.vrs)))
        if len(names) != len(config.vrs) or len(set(names)) != len(names):
            raise ValueError(f"need {len(config.vrs)} distinct VR names, got {names!r}")
        vrs = tuple(
            SimVr(name=n, offered_pps=v.traffic.rate_pps, initial_cap_percent=v.initial_cap_percent,
                  traffic=v.traffic.kind, interfaces=interfaces)
            for n, v in zip(names, config.vrs)
        )
        return cls(vrs, config.seed, None, dt_s=config.dt_s, clock=clock, cap_step_percent=cap_step_percent,
                   plant_config=config)

    #: The daemon's configuration validates ``[sim]`` with this (:func:`xtc.host.base.host_plugin`).
    CONFIG_TABLE = SimSection

    @classmethod
    def from_config(cls, cfg: DaemonConfig, clock: Callable[[], float] | None = None) -> "SimHost":
        """The host a daemon with ``backend = "sim"`` runs on (its ``[sim]`` table)."""
        sim: SimSection = cfg.backend_options
        return cls(sim.vr, sim.seed, Path(cfg.daemon.state_dir) / HYPERVISOR_FILE, clock=clock)

    # -------------------------------------------------------------- the hypervisor's memory
    def _load_hypervisor(self, names: set[str]) -> dict[str, float | None]:
        if self.hypervisor_path is None or not self.hypervisor_path.exists():
            return {}
        try:
            doc = json.loads(self.hypervisor_path.read_text())
            caps = doc["caps"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ActuatorError(f"simulated hypervisor file {self.hypervisor_path} unreadable: {e}") from None
        out: dict[str, float | None] = {}
        for n, c in caps.items():
            if n in names and (c is None or (isinstance(c, (int, float)) and math.isfinite(c) and 1 <= c <= 100)):
                out[n] = None if c is None else float(c)
        return out

    def _save_hypervisor(self) -> None:
        if self.hypervisor_path is None:
            return
        try:
            save_state(self.hypervisor_path, {"caps": self.caps})
        except StateFileError as e:
            raise ActuatorError(str(e)) from None

    # ------------------------------------------------------------------------------- host
    def list_vrs(self) -> dict[str, tuple[str, ...]]:
        return {n: self.interfaces(n) for n in self.vr_names}

    def read_counters(self) -> dict[str, IfCounters]:
        """The plant's counters now, as ``/proc/net/dev`` text read by the real parser."""
        self.advance()
        return parse_proc_net_dev(render_proc_net_dev(self.interface_counters()))

    def read_cpu_ns(self, vrs: Iterable[str]) -> dict[str, int]:
        """Cumulative CPU time (nanoseconds) each of ``vrs`` has used since the plant started.

        The plant is first advanced to the host's clock, as for :meth:`read_counters`, so the time
        is integrated over the simulator's own clock.  A VR's use per sub-step is
        ``min(cap, hog_fraction * cap + delivered_pps / (k * speed_factor))`` percent of one CPU
        (see :meth:`xtc_lab.sim.plant.Plant.cpu_seconds`): the cap when it binds, less when the VR
        is offered less than its cap can forward.  Names that are not simulated VRs are left out.
        """
        self.advance()
        cpu_s = self.plant.cpu_seconds()
        out: dict[str, int] = {}
        for vr in vrs:
            i = self._index.get(vr)
            if i is not None:
                out[vr] = int(round(float(cpu_s[i]) * 1e9))
        return out

    def interfaces(self, vr: str) -> tuple[str, ...]:
        i = self._index[vr] + 1
        return tuple(f"vif{i}.{k}" for k in range(self._nif[vr]))

    def interface_counters(self) -> dict[str, tuple[int, int]]:
        """``{ifname: (host rx packets, host tx packets)}`` from the plant's counters."""
        c = self.plant.counters()
        out: dict[str, tuple[int, int]] = {}
        for vr, i in self._index.items():
            ifs = self.interfaces(vr)
            fwd = int(c.forwarded_packets[i])
            off = int(c.to_vr_packets[i])
            for k, name in enumerate(ifs):
                rx = fwd if k == len(ifs) - 1 else 0
                tx = off if k == 0 else 0
                out[name] = (rx, tx)
        return out

    def _vr(self, vr: str) -> int:
        i = self._index.get(vr)
        if i is None:
            raise VRNotRunning(vr, "no such simulated VR")
        return i

    def read_cap(self, vr: str) -> float | None:
        self._vr(vr)
        return self.caps[vr]

    def apply_cap(self, vr: str, cap_percent: float) -> float:
        i = self._vr(vr)
        if isinstance(cap_percent, bool) or not isinstance(cap_percent, (int, float)) or not math.isfinite(cap_percent) or not (1.0 <= cap_percent <= 100.0):
            # 0 would mean UNLIMITED to Xen: refuse anything outside 1..100.
            raise ActuatorError(f"refusing cap {cap_percent!r} for {vr!r}: must be within 1..100 percent of one CPU")
        cap = float(cap_percent)
        if self.cap_step_percent is not None:
            q = self.cap_step_percent
            cap = min(100.0, max(q * math.ceil(1.0 / q - 1e-9), q * round(cap / q)))
        if self.caps[vr] is not None and cap == self.caps[vr]:
            return cap  # the setting in force already: nothing to write
        self.advance()
        try:
            applied = self.plant.set_cap(i, cap)
        except PlantError as e:
            raise ActuatorError(f"simulated plant refused cap for {vr!r}: {e}") from None
        self.caps[vr] = applied
        self.writes += 1
        self._save_hypervisor()
        return applied

    def cap_writes(self) -> int:
        """Caps written so far (a cap equal to the one in force is not written)."""
        return self.writes

    def snapshot(self, vr: str) -> dict[str, Any]:
        self._vr(vr)
        return {"backend": self.name, "target": vr, "params": {"cap_percent": self.caps[vr]}}

    def configured_vrs(self) -> frozenset[str]:
        """The VRs of ``[[sim.vr]]``."""
        return frozenset(self.vr_names)

    def check_original(self, vr: str, original: Mapping[str, Any]) -> None:
        """Raise ValueError naming why ``original`` is not a record of ``vr``'s simulated cap."""
        self._vr(vr)
        self._original_cap(vr, original)

    def _original_cap(self, vr: str, original: Mapping[str, Any]) -> float | None:
        """The cap a record of :meth:`snapshot` holds (None = unlimited); ValueError if it is not one of ``vr``."""
        if not isinstance(original, Mapping):
            raise ValueError(f"a record is a JSON object, got {type(original).__name__}")
        if original.get("backend") != self.name or original.get("target") != vr:
            raise ValueError(f"the record is for {original.get('backend')} {original.get('target')!r}, "
                             f"this VR is {self.name} {vr!r}")
        if set(original) != {"backend", "target", "params"}:
            raise ValueError(f"a simulated cap record has exactly 'backend', 'target' and 'params', got {sorted(original)}")
        params = original["params"]
        if not isinstance(params, Mapping) or set(params) != {"cap_percent"}:
            raise ValueError(f"'params' must hold exactly 'cap_percent', got {params!r}")
        cap = params["cap_percent"]
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, float))
                                or not math.isfinite(cap) or not 1.0 <= cap <= 100.0):
            raise ValueError(f"'cap_percent' must be 1..100 percent or null (unlimited), got {cap!r}")
        return None if cap is None else float(cap)

    def restore_cap(self, vr: str, cap_percent: float | None, original: Mapping[str, Any] | None = None) -> None:
        if original is not None:
            try:
                cap_percent = self._original_cap(vr, original)
            except ValueError as e:
                raise ActuatorError(f"original record {dict(original)!r} is not a simulated cap of {vr!r}: {e}") from None
        if cap_percent is None:
            i = self._vr(vr)
            self.advance()
            self.plant.set_cap(i, 100.0)
            self.caps[vr] = None
            self._save_hypervisor()
        else:
            self.apply_cap(vr, cap_percent)

    def advance(self) -> None:
        """Step the plant up to the host's clock (at most 60 s of simulated time at once)."""
        now_s = self.clock()
        if self._t0 is None:
            self._t0 = now_s
        target_steps = int((now_s - self._t0) / self.plant.dt_s + 1e-9)
        # Never simulate more than 60 s at once (a suspended process must not stall the loop).
        todo = min(max(0, target_steps - self.plant.steps), int(60.0 / self.plant.dt_s))
        for _ in range(todo):
            self.plant.step()
        if target_steps - self.plant.steps > 0:
            self._t0 = now_s - self.plant.steps * self.plant.dt_s

    def limiter(self) -> SimLimiter:
        """Early drop's limiter on the plant (:class:`SimLimiter`): what the simulated runs hand
        :class:`xtc.daemon.limiter_state.EarlyDrop` (the daemon itself opens none on a sim host)."""
        return SimLimiter(self)

    def close(self) -> None:
        pass


class SimLimiter:
    """The :class:`xtc.host.limiter.Limiter` contract on the simulated plant (issue 48's early drop).

    A VR's limit is the setting on its first interface (``vif<i>.0``, where its offered packets
    arrive), in packets/s at the plant's frame size (the daemon derives bytes/s from the mean
    packet size the counters show: :data:`_FRAME_BYTES`); the plant drops what its source sends
    beyond it before delivery (:meth:`xtc_lab.sim.plant.Plant.set_limit`).  The other interfaces
    carry the setting too (the daemon puts the same limit on each) and drop nothing.
    """

    def __init__(self, host: SimHost) -> None:
        self._host = host
        self._settings: dict[str, LimiterSetting] = {}
        self._base: dict[str, float] = {}  # the plant's drop counter when the limiter was put on

    def _where(self, ifname: str) -> tuple[int, bool]:
        for vr in self._host.vr_names:
            ifs = self._host.interfaces(vr)
            if ifname in ifs:
                return self._host._vr(vr), ifname == ifs[0]
        raise LimiterError(f"{ifname}: no such simulated interface")

    def _dropped_now(self, i: int) -> float:
        self._host.advance()
        return float(self._host.plant.counters().limiter_dropped_packets[i])

    def install(self, ifname: str, setting: LimiterSetting) -> bool | None:
        i, first = self._where(ifname)
        new = ifname not in self._settings
        self._settings[ifname] = setting
        if first:
            self._host.advance()  # what came before ran without (or with the old) limit
            self._host.plant.set_limit(i, setting.rate_bytes_per_s / _FRAME_BYTES)
            if new:
                self._base[ifname] = self._dropped_now(i)
        return new

    def update(self, ifname: str, setting: LimiterSetting) -> None:
        if ifname not in self._settings:
            raise LimiterError(f"{ifname}: no limiter to change")
        self.install(ifname, setting)

    def remove(self, ifname: str) -> bool:
        if ifname not in self._settings:
            return False
        i, first = self._where(ifname)
        del self._settings[ifname]
        self._base.pop(ifname, None)
        if first:
            self._host.advance()
            self._host.plant.set_limit(i, None)
        return True

    def dropped_packets(self, ifname: str) -> int | None:
        if ifname not in self._settings:
            return None
        i, first = self._where(ifname)
        return int(self._dropped_now(i) - self._base[ifname]) if first else 0

    def adopt(self, ifname: str) -> tuple[LimiterSetting | None, int] | None:
        d = self.dropped_packets(ifname)
        return None if d is None else (self._settings[ifname], d)

    def dropped_by_interface(self, ifnames: Iterable[str]) -> dict[str, int]:
        out = {}
        for n in ifnames:
            d = self.dropped_packets(n)
            if d is not None:
                out[n] = d
        return out

    def close(self) -> None:
        pass
