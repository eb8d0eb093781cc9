"""The XCo agent's view of its uplink: a gate per destination host (the contract, no I/O here), beside its
adapter (:mod:`xtc.host.tcgate`) in the host layer.

The local coordinator (:mod:`xtc.xco.agent`) decides, slice by slice, towards which destination
hosts this host may send; a :class:`Gate` enforces that on the host's uplink.  The production
gate, :class:`xtc.host.tcgate.TcGate`, does it with stock Linux queueing over netlink (an HTB
root, one class per destination host with a TBF leaf that is opened, closed or rate-limited, and
one classifier per VM-to-VM flow pointing at its destination's class; see notes on the kernel in
docs/results/2026-11-26-xco/xco.md); tests of the agent's logic use an in-memory gate.

A destination is a host id (its index in the topology: what directives name).  Its flows are
VM-to-VM: classified by source and destination VM address.  A flow starts *small*, in a class of
its own that is never held (so that what it sends is counted); when it has sent enough to be
scheduled, the agent moves it into its destination's class (:meth:`Gate.move_to_dest`), where it
is held and released with the destination's other large flows.  A flow the gate has not been told
about, and every ICMP packet, goes through an unheld default class.

Rates are bits per second.  ``OPEN`` means "no limit but the link"; ``CLOSED`` means hold
everything (the packets queue in the destination's leaf until it opens).  On stock Linux a class
that closes still lets out one frame's worth of bytes (MTU + 18) at that moment: every TBF change
refills its bucket (see :mod:`xtc.host.tcgate`).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence, Union

__all__ = ["Flow", "DestStats", "Gate", "OPEN", "CLOSED", "GateError"]

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]

#: A destination's state: ``OPEN`` (line rate), ``CLOSED`` (held), or a positive rate limit in bits/s.
OPEN: int = -1
CLOSED: int = 0


class GateError(RuntimeError):
    """A gate operation failed; the message names the interface, the destination or flow and the
    kernel's error."""


@dataclass(frozen=True, order=True)
class Flow:
    """One VM-to-VM flow leaving this host.

    Attributes
    ----------
    src, dst : IPv4Address | IPv6Address
        The source VM's address (a VM of this host) and the destination VM's address.
    dest_host : int
        The destination VM's host id (its index in the topology): what directives name.
    """

    src: IPAddress
    dst: IPAddress
    dest_host: int

    def __post_init__(self) -> None:
        # Flows key the gate's and the agent's dicts: hashing two ipaddress objects costs ~1.5 us,
        # so the hash is computed once.
        object.__setattr__(self, "_hash", hash((self.src, self.dst, self.dest_host)))

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined,no-any-return]

    def __reduce__(self) -> tuple[Any, ...]:  # the hash of a str differs between processes
        return (Flow, (self.src, self.dst, self.dest_host))


@dataclass(frozen=True)
class DestStats:
    """A destination's counters (its class's), read from the kernel in one dump.

    Attributes
    ----------
    sent_bytes, sent_packets : int
        Everything the destination's class has let out since it was added.
    backlog_bytes, backlog_packets : int
        What is queued in the destination's class now (held, or waiting for the link).
    """

    sent_bytes: int
    sent_packets: int
    backlog_bytes: int
    backlog_packets: int


class Gate(Protocol):
    """Per-destination gating on one uplink.  Every method raises :class:`GateError` on failure."""

    def install(self) -> None:
        """Take over the uplink's root qdisc (remembering the original)."""

    def add_dest(self, dest: int, state: int = OPEN) -> None:
        """Give destination host ``dest`` its own class, in ``state``."""

    def add_flow(self, flow: Flow) -> None:
        """Classify ``flow`` (source AND destination address) into a class of its own, never held
        (a small flow); its ``dest_host`` must have been added."""

    def move_to_dest(self, flow: Flow) -> None:
        """Classify the (small) flow into its destination's class from now on; its own class goes."""

    def remove_flow(self, flow: Flow) -> None:
        """Remove the flow's classifier (and its own class if small); its packets go through the
        default class again."""

    def remove_dest(self, dest: int) -> None:
        """Remove the destination's class and the classifiers of its flows."""

    def set_states(self, states: Mapping[int, int], open_for_us: Mapping[int, int] | None = None) -> None:
        """Set each destination's state (``OPEN``, ``CLOSED`` or a rate in bits/s) and wake the uplink.

        Destinations not named keep their state.  Only changes reach the kernel; after any change
        a packet is sent out of the device so that a newly opened class sends at once.

        ``open_for_us`` (destination -> microseconds; only for destinations set ``OPEN`` in
        ``states``): the destination sends at most what the link carries in that time (plus the
        opening burst if it was closed) and is then held by the gate itself until its next change,
        however late that comes: the end of a timeslice enforced where the packets are.  Such a
        destination is changed even if it was ``OPEN`` already (the budget starts again).
        """

    def stats(self) -> dict[int, DestStats]:
        """Every destination's counters and backlog, from one netlink dump."""

    def counters(self, dests: Sequence[int], small: Sequence[Flow] = ()) -> tuple[Any, Any, Any, Any]:
        """The counters the agent polls, as arrays in the order of ``dests`` (every one added) and
        of ``small`` (flows not moved to their destination's class), from one read.

        Returns
        -------
        sent_bytes, backlog_bytes, backlog_packets : numpy.ndarray of int64
            What each destination's class has let out (bytes) and has queued now (bytes, packets).
        small_sent_bytes : numpy.ndarray of int64
            What each small flow's own class has let out (bytes).
        """

    def restore(self) -> None:
        """Put the uplink's original root qdisc back (idempotent)."""

    def close(self) -> None:
        """Release sockets; does not restore (call :meth:`restore` for that)."""
