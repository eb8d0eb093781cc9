"""The increase of a cumulative interface counter between two readings: pure (no I/O).

Kernel counters only grow, so a counter that went *down* between two readings
either wrapped around its width or restarted from 0 because the interface was
deleted and created again under the same name (a VR reboots).

On a 64-bit kernel every counter either source reports is 64 bits wide (the
kernel's ``struct net_device_stats`` uses ``unsigned long`` and
``rtnl_link_stats64`` is u64; ``/proc/net/dev`` prints the same u64 values).
A 64-bit packet counter at 150 Mpps wraps after about 3900 years, so there is
no wrap to guess: a decrease is a reset, and :func:`counter_delta` says so
(verdict ``"reset"``).

Counters can be 32 bits wide only on a 32-bit kernel, where drivers that fill
``net_device_stats`` (``unsigned long``) give values that wrap at 2**32.  That
holds for **both** sources (netlink copies those values into its 64-bit
struct), so the width is a property of the kernel, not of the source: both
sources expose ``counter_bits`` (:func:`kernel_counter_bits` for live reads).
Only with ``counter_bits=32`` does :func:`counter_delta` apply the old
``/proc`` rule: a decrease from below 2**32 whose wrapped increase is at most
``max_increase`` is a 32-bit wrap, anything else a reset.

Public API
----------
counter_delta(prev, cur, *, counter_bits=64, max_increase=None) -> CounterDelta
kernel_counter_bits(machine=None) -> int
CounterDelta, Verdict
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

__all__ = ["CounterDelta", "Verdict", "counter_delta", "kernel_counter_bits"]

Verdict = Literal["ok", "wrap32", "reset", "jump"]


@dataclass(frozen=True, slots=True)
class CounterDelta:
    """The increase of one counter between two readings.

    Attributes
    ----------
    delta : int
        Units (packets, bytes) counted between the readings; never negative.
    verdict : {"ok", "wrap32", "reset", "jump"}
        ``"ok"``: a plain increase.  ``"wrap32"``: a 32-bit counter wrapped
        (only with ``counter_bits=32``).  ``"reset"``: the counter went down
        because it restarted from 0 (the interface was re-created);
        ``delta`` is then the new value, i.e. what was counted since the
        re-creation, a lower bound of the interval's traffic (0 when that
        value exceeds ``max_increase``).  ``"jump"``: an increase larger
        than ``max_increase``; nothing is counted.
    """

    delta: int
    verdict: Verdict


def counter_delta(
    prev: int, cur: int, *, counter_bits: int = 64, max_increase: float | None = None
) -> CounterDelta:
    """The increase of a cumulative counter between two readings.

    Parameters
    ----------
    prev, cur : int
        The counter at the older and at the newer reading, 0 .. 2**counter_bits - 1.
    counter_bits : {64, 32}
        Width at which the counter wraps: 64 on 64-bit kernels (both sources),
        32 only on 32-bit kernels; see the module notes and
        :func:`kernel_counter_bits`.
    max_increase : float, optional
        Largest plausible increase between the two readings (the largest
        plausible rate times the interval, e.g. packets).  Needed with
        ``counter_bits=32`` to tell a wrap from a reset; with 64 bits it only
        turns implausible increases into ``"jump"``.

    Returns
    -------
    CounterDelta

    Raises
    ------
    ValueError
        A value outside the counter's range, an unknown width, or
        ``counter_bits=32`` without ``max_increase``.
    """
    if counter_bits not in (32, 64):
        raise ValueError(f"counter_bits must be 32 or 64, got {counter_bits}")
    top = 1 << counter_bits
    if not (0 <= prev < top and 0 <= cur < top):
        raise ValueError(f"counter values must be in 0..2**{counter_bits}-1, got prev={prev}, cur={cur}")
    if counter_bits == 32 and max_increase is None:
        raise ValueError("a 32-bit counter needs max_increase to tell a wrap from a reset")
    if cur >= prev:
        d = cur - prev
        if max_increase is not None and d > max_increase:
            return CounterDelta(0, "jump")
        return CounterDelta(d, "ok")
    if counter_bits == 32:
        wrapped = top - prev + cur
        assert max_increase is not None
        if wrapped <= max_increase:
            return CounterDelta(wrapped, "wrap32")
    if max_increase is not None and cur > max_increase:
        return CounterDelta(0, "reset")
    return CounterDelta(cur, "reset")


_MACHINES_64 = frozenset(
    {
        "x86_64", "amd64", "aarch64", "arm64", "aarch64_be", "ppc64", "ppc64le", "s390x",
        "riscv64", "mips64", "loongarch64", "sparc64", "alpha", "ia64",
    }
)  # fmt: skip


def kernel_counter_bits(machine: str | None = None) -> int:
    """Width (bits) at which the kernel's interface counters can wrap.

    Parameters
    ----------
    machine : str, optional
        ``uname -m`` of the kernel; default the running one (``os.uname()``).

    Returns
    -------
    int
        64 for a 64-bit kernel, 32 otherwise (also for a machine name not
        known to be 64-bit: the 32-bit rule then still needs a plausibility
        bound, so it cannot silently miscount a 64-bit counter).
    """
    m = os.uname().machine if machine is None else machine
    return 64 if m.lower() in _MACHINES_64 else 32
