"""The value every counter source returns: one interface's cumulative counters.

Kept in its own module so that the pure decoders (:mod:`xtc.host.rtnl_codec`)
and the adapters (:mod:`xtc.host.counters`, which re-exports it) share it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["IfCounters"]


@dataclass(frozen=True, slots=True)
class IfCounters:
    """Cumulative counters of one interface as the kernel reports them.

    Attributes
    ----------
    rx_packets, tx_packets : int
        Packets received / sent, 0 .. 2**64-1.
    rx_bytes, tx_bytes : int
        Bytes received / sent.
    rx_drops, tx_drops : int
        Packets dropped, as ``/proc/net/dev`` counts them: ``rx_drops`` is the
        kernel's ``rx_dropped + rx_missed_errors``, ``tx_drops`` its
        ``tx_dropped``.

    Notes
    -----
    "rx" is what the namespace that was read received on the interface, "tx"
    what it sent.
    """

    rx_packets: int
    tx_packets: int
    rx_bytes: int = 0
    tx_bytes: int = 0
    rx_drops: int = 0
    tx_drops: int = 0

    def as_tuple(self) -> tuple[int, int, int, int, int, int]:
        """The six counters in field order."""
        return (
            self.rx_packets,
            self.tx_packets,
            self.rx_bytes,
            self.tx_bytes,
            self.rx_drops,
            self.tx_drops,
        )
