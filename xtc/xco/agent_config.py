"""The XCo agent's configuration: a TOML file, validated, unknown keys refused naming the key.

A complete example (every key with its default unless marked required)::

    schema = "xco-agent/1"
    topology = "xco-topology.toml"   # required; relative to this file's directory
    host = "h1"                      # required: this host's name in the topology
    uplink = "eth0"                  # required: the interface the gate takes over
    link_bps = 1000000000            # uplink rate, bits/s (default: the host's nic_bps)
    open_burst_bytes = 125000        # an open destination's burst, bytes (default: 1 ms at link_bps,
                                     # at least two frames: 2 x (MTU + 18))
    controller = "10.0.0.254:7800"   # required: the controller's UDP address:port
    bind = "0.0.0.0:0"               # where the agent's UDP socket is bound
    small_flow_bytes = 100000        # a flow that has sent no more than this is never held; the
                                     # senders that may start together into one switch port send
                                     # this much each at once: keep their sum within its buffer
    giveup_after_us = 2000           # a destination with nothing queued this long is given up
    giveup_quiet_us = 0              # timeslices: the destination in force given up at once when
                                     # the counters prove nothing entered its class this long
                                     # (read when its queue should have drained); 0 = off
    idle_poll_us = 0                 # counters read at least this often when idle too
                                     # (a held destination's first packets wait for a read); 0 = off
    slot_budget = true               # timeslices: the gate holds an open destination at its slot's
                                     # end by itself (a byte budget), however late the next directive
    rate_burst_us = 1000             # rate mode: a rate limit's burst, as time at its rate (a flow
                                     # that went idle catches up this much; the next switch queues
                                     # up to this much of the link on top), at least one frame
    close_guard_us = 0               # a directive's closes take effect this long before its start
                                     # (its opens at the start): a closing class's last frame
                                     # leaves inside its slot; 0 = off, at most 500
    pass_tcp_control = true          # TCP packets under 128 bytes (pure ACKs, SYN, FIN, RST) never
                                     # held: a held flow's ACKs would stall the opposite flow
    gso_max_segs = 1                 # with slot_budget: the uplink's gso_max_segs while the agent
                                     # runs, so that local TCP senders hand the gate frames (a GSO
                                     # packet bigger than what is left of a budget waits for the
                                     # rest of the slice); 0 = leave the device as it is
    poll_us = 500                    # counters read this often; once welcomed, rounded up to
                                     # whole slices, just before a slot boundary (and every
                                     # max(poll_us, giveup_after_us / 2) while a reported
                                     # destination is granted)
    register_interval_us = 100000    # register re-sent this often until welcomed
    fail_open_slices = 3             # slices of controller silence before failing open
    clock_window_us = 1000000        # a controller message further than this from now is stale
    netns = "ns1"                    # optional: the uplink's network namespace
    realtime_priority = 0            # 1..99: run under SCHED_FIFO at this priority (0 = normal)
    auth_key_file = "xco.key"        # optional: the controller's shared key (xtc/xco/auth.py);
                                     # relative to this file's directory

    [metrics]
    enabled = true
    address = "127.0.0.1"
    port = 8973                      # 0 = an ephemeral port (logged at start)

    [log]
    format = "json"                  # "json" or "kv"
    level = "info"

:func:`load_agent_config` returns a frozen :class:`AgentConfig` or raises :class:`AgentConfigError`
naming the key; :func:`check_against_topology` checks ``host`` and ``link_bps`` against the topology.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import AfterValidator, Field

from xtc.validation import DocumentError, Fail, within

from .controller_config import ConfigFile, Int, LogConfig, StrictTable, checked_address, parse_listen
from .controller_config import MetricsConfig as ControllerMetrics

if TYPE_CHECKING:
    from .topology import Topology

__all__ = [
    "SCHEMA",
    "AgentConfig",
    "AgentConfigError",
    "check_against_topology",
    "load_agent_config",
    "loads_agent_config",
]

SCHEMA = "xco-agent/1"

def _ifname(s: str) -> str:
    if not 0 < len(s) < 16 or "/" in s or any(c.isspace() for c in s):
        raise ValueError(f"must be an interface name (1..15 characters, no '/' or spaces), got {s!r}")
    return s


class AgentMetricsConfig(ControllerMetrics):
    port: Annotated[Int, within(0, 65535)] = 8973


class AgentConfig(StrictTable):
    """The validated configuration (frozen).  ``topology`` is resolved against the file's directory."""

    schema_: Literal["xco-agent/1"] = Field(alias="schema")
    topology: Annotated[str, Field(min_length=1)]
    host: Annotated[str, Field(min_length=1, max_length=64)]
    uplink: Annotated[str, AfterValidator(_ifname)]
    link_bps: Annotated[Int, within(1, 10**13)] | None = None
    #: The burst of an OPEN destination's TBF leaf, bytes: what it may send at once when its slice opens,
    #: on top of what the previous sender left in the next switch's queue.  None = 1 ms at
    #: ``link_bps``, at least two frames (:func:`xtc.host.tcgate.default_open_burst_bytes`).
    open_burst_bytes: Annotated[Int, within(64, 2**31 - 1)] | None = None
    controller: Annotated[str, AfterValidator(checked_address)]
    bind: Annotated[str, AfterValidator(checked_address)] = "0.0.0.0:0"
    small_flow_bytes: Annotated[Int, within(0, 10**12)] = 100_000
    giveup_after_us: Annotated[Int, within(0, 10_000_000)] = 2_000
    #: Timeslices: the destination in force is given up as soon as two counter dumps this far apart
    #: or more prove that nothing entered its class between them (its queue drained and its
    #: sender silent), without waiting for ``giveup_after_us``; the agent reads the counters when
    #: the class's queue should have drained (docs/results/2026-11-26-xco/xco.md, "Agent").  0 = off.
    giveup_quiet_us: Annotated[Int, within(0, 10_000_000)] = 0
    #: The counters are read at least this often even when nothing is reported (a destination
    #: without a rate or a slot is held, and a flow that has just turned large waits for the read
    #: that reports its queue: once a slice otherwise).  An idle read is the cheap probe.  0 = off.
    idle_poll_us: Annotated[Int, within(0, 1_000_000)] = 0
    #: Timeslices: each open slice is given, in the gate, the bytes the link carries until the end
    #: of its slot, so that the kernel holds the destination at the slot's end by itself however late
    #: the next directive is applied (docs/results/2026-11-26-xco/xco.md, "Agent").  false: the agent's own close only.
    slot_budget: bool = True
    #: A directive's closes are made this long before its start, its opens at the start, and a slot
    #: budget ends this long before its slot: a TBF change refills the closing class's bucket with
    #: one frame, which leaves at once when packets are queued there, and the change itself lands
    #: some tens of microseconds after the agent makes it; the guard puts both inside the slot
    #: (docs/results/2026-11-26-xco-testbed/xco-testbed.md, "A guard before the close").  The link idles about this long a slot.
    #: At most 500 us: a directive that also opens spins from its closes to its start, at a
    #: real-time priority.  0 = off.
    close_guard_us: Annotated[Int, within(0, 500)] = 0
    #: Rate mode: a rate limit's burst as time at its rate, microseconds (at least one frame): what
    #: a destination under a rate that went idle sends at once when its packets come back, so a
    #: flow that started late or stalled catches up that much.  The next switch's port queues up to
    #: this much of the link on top of its queue (the rates of a link sum to its rate), and every
    #: rate change refills the bucket: keep it well inside the switches' buffers
    #: (docs/results/2026-11-26-xco-testbed/xco-testbed.md, "A rate's burst").
    rate_burst_us: Annotated[Int, within(100, 100_000)] = 1000
    #: With ``slot_budget``: the uplink's ``gso_max_segs`` while the agent runs, given back when it
    #: stops (``--cleanup`` after a kill: the kernel's default).  A slot budget's TBF leaf takes a
    #: packet whole, and TCP hands the qdisc GSO packets of up to 64 KB whatever the device's
    #: offload features say; one bigger than what is left of the budget waits for the rest of the
    #: slice.  1 makes the sockets that send through the uplink send frames (forwarded GSO packets
    #: are not split: docs/results/2026-11-26-xco/xco.md, "Agent").  0 = leave the device as it is.
    gso_max_segs: Annotated[Int, within(0, 65535)] = 1
    #: TCP packets shorter than 128 bytes (pure ACKs, SYN, FIN, RST) are never held
    #: (:data:`xtc.host.tcgate.TCP_CONTROL_BYTES`): holding a VM pair's flow then never holds the
    #: acknowledgements of the opposite pair's, which would stall that flow.
    pass_tcp_control: bool = True
    poll_us: Annotated[Int, within(50, 1_000_000)] = 500
    register_interval_us: Annotated[Int, within(1_000, 60_000_000)] = 100_000
    fail_open_slices: Annotated[Int, within(1, 1000)] = 3
    clock_window_us: Annotated[Int, within(1_000, 600_000_000)] = 1_000_000
    netns: Annotated[str, Field(min_length=1, max_length=255)] | None = None
    #: SCHED_FIFO priority (1..99) for the agent's process, 0 = the normal scheduler.  On a loaded
    #: host the normal scheduler wakes the agent 0.2-1.4 ms late for a slice boundary; a real-time
    #: priority wakes it on time (the agent sleeps between events, so it cannot hog the CPU).
    realtime_priority: Annotated[Int, within(0, 99)] = 0
    auth_key_file: Annotated[str, Field(min_length=1)] | None = None
    metrics: AgentMetricsConfig = AgentMetricsConfig()
    log: LogConfig = LogConfig()

    @property
    def controller_address(self) -> tuple[str, int]:
        return parse_listen(self.controller)

    @property
    def bind_address(self) -> tuple[str, int]:
        return parse_listen(self.bind)

    @property
    def gate_gso_max_segs(self) -> int | None:
        """What the gate sets the uplink's ``gso_max_segs`` to (None: left as it is)."""
        return self.gso_max_segs if self.slot_budget and self.gso_max_segs else None


class AgentConfigError(DocumentError):
    """An agent configuration is invalid.  ``key`` names the culprit."""


def _check_controller_port(cfg: AgentConfig, fail: Fail) -> None:
    if parse_listen(cfg.controller)[1] == 0:
        raise fail("controller", f"port must be 1..65535, got {cfg.controller!r}")


AGENT_CONFIG = ConfigFile(
    AgentConfig, AgentConfigError,
    {"interface": "uplink", "ifname": "uplink", "name": "host", "listen": "bind",
     "controller_address": "controller", "giveup_us": "giveup_after_us", "metrics_port": "metrics.port",
     "burst": "open_burst_bytes", "open_burst": "open_burst_bytes"},
    ("topology", "auth_key_file"), _check_controller_port)
#: Parse and validate configuration text (:meth:`ConfigFile.loads`): an :class:`AgentConfig`; a
#: relative ``topology`` or ``auth_key_file`` is resolved against ``base_dir``.
loads_agent_config = AGENT_CONFIG.loads
#: Load and validate a configuration file (:meth:`ConfigFile.load`): an :class:`AgentConfig`.
load_agent_config = AGENT_CONFIG.load


def check_against_topology(cfg: AgentConfig, topo: Topology, source: str | None = None) -> tuple[int, int]:
    """This host's id and uplink rate (bits/s): ``host`` must be in the topology.

    Raises
    ------
    AgentConfigError
        On ``host`` if the topology has no such host.
    """
    if not topo.has_host(cfg.host):
        shown = ", ".join(topo.hosts[:5]) + (", ..." if topo.n_hosts > 5 else "")
        raise AgentConfigError("host", f"no host {cfg.host!r} in the topology ({shown})", source)
    x = topo.host_id(cfg.host)
    return x, cfg.link_bps if cfg.link_bps is not None else int(topo.nic_bps[x])
